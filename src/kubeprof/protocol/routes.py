"""URL paths of the operator's ingest API, for the server's router and the agent's client.

The *_ROUTE patterns are aiohttp route templates; the functions build the concrete paths
an agent requests (path segments percent-quoted).
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

PREFIX = "/v1/sessions"  # every per-session endpoint lives under /v1/sessions/{ns}/{name}
BATCHES_ROUTE = PREFIX + "/{namespace}/{name}/batches"  # POST: one gzip batch
TARGETS_ROUTE = PREFIX + "/{namespace}/{name}/targets"  # GET ?node=N: target pods on N
METRICS = "/metrics"  # GET: Prometheus text
HEALTHZ = "/healthz"  # GET: "ok" while the API serves
# POST: a light agent's heartbeat (protocol.light.Heartbeat) -> its deep assignments.
LIGHT_ASSIGNMENTS = "/v1/light/assignments"

BATCH_ID_HEADER = "X-Kubeprof-Batch-Id"  # the batch id again, for proxies' logs


def session_path(namespace: str, name: str) -> str:
    """/v1/sessions/{namespace}/{name}, each segment quoted."""
    return f"{PREFIX}/{quote(namespace, safe='')}/{quote(name, safe='')}"


def batches_path(namespace: str, name: str) -> str:
    """Where an agent POSTs the session's batches."""
    return session_path(namespace, name) + "/batches"


def targets_path(namespace: str, name: str, node: str) -> str:
    """Where an agent GETs the session's target pods on `node`."""
    return session_path(namespace, name) + "/targets?" + urlencode({"node": node})
