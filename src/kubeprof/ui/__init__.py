"""The web UI: a read-only JSON API over the store and the pages that use only it.

`api` answers the questions (sessions, a session's summary, a flame graph, a diff) as
JSON-ready dicts; `routes` maps URL paths to them; `server` serves them with the standard
library for `kubeprof ui`, and the operator mounts the same routes on its HTTP server.
"""
