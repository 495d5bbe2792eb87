"""The one contract between the node agent and the operator: wire codec, ingest routes,
session phases and the agent's settings. Agent and operator import it, never each other.
"""
