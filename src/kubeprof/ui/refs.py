"""Naming a stored session for the web: (namespace, name) and back, and what never leaves.

A cluster session's row is named "namespace/name@uid" by the operator; the UI calls it by
the ProfilingSession's namespace and name (the newest when a name was reused). A local
`kubeprof record` session lives in namespace ``local``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sqlalchemy.engine import Connection

from kubeprof.storage import queries as q

LOCAL = "local"  # the namespace of sessions recorded with `kubeprof record`
_SECRET = re.compile(r"token|secret|passw|credential|authorization", re.I)
_STORE_NAME = re.compile(r"^(?P<ns>[^/]+)/(?P<name>.+)@(?P<uid>[0-9a-f-]*)$")


class ApiError(LookupError):
    """A request the API cannot answer: `status` is the HTTP status, the message says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def ref_of(info: q.SessionInfo) -> tuple[str, str]:
    """(namespace, name) of a stored session: cluster rows are "ns/name@uid"."""
    m = _STORE_NAME.match(info.name) if info.kind == "cluster" else None
    return (m["ns"], m["name"]) if m else (LOCAL, info.name)


def find(conn: Connection, namespace: str, name: str) -> q.SessionInfo:
    """The session (namespace, name); the newest one when a cluster name was reused."""
    found = [s for s in q.list_sessions(conn, counts=False) if ref_of(s) == (namespace, name)]
    if not found:
        raise ApiError(404, f"no session {namespace}/{name}; GET /api/v1/sessions lists them")
    return found[-1]


def safe_meta(meta: Mapping[str, str]) -> dict[str, str]:
    """Meta without entries whose key looks like a credential (none should exist)."""
    return {k: v for k, v in meta.items() if not _SECRET.search(k)}


def pod_names(meta: Mapping[str, str]) -> dict[str, str]:
    """Pod UID -> "namespace/name", as the operator keeps them in the session's meta."""
    return {k.removeprefix("pod:"): v for k, v in meta.items() if k.startswith("pod:")}
