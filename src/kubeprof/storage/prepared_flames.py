"""Prepared flame graphs: a final session's whole-session flame graph (no time range, pod
or GPU), as the web UI answers it, stored once and read back.

The page asks for this graph first. Built from `stack_counts` it costs a read of every
distinct stack and a tree (about 2 s on 10 M samples); read from the session's prepared
view it costs decoding megabytes the summary decodes too. Stored here as the answer's own
JSON (a few kB), it is one small row. The rules are `prepared_views`' (one row per session
and key; only a final session's; read back while the code fingerprint and the session's
seal match; gone with the session), and the body is JSON, which never runs code.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from sqlalchemy.engine import Connection, Engine

from kubeprof.storage.models import PreparedFlameRow
from kubeprof.storage.prepared_views import read_body, write_body
from kubeprof.storage.queries import SessionInfo

log = logging.getLogger(__name__)


def key(view: str, keep_interpreter: bool) -> str:
    """The row's key: the graph's view and `kubeprof report`'s flag that shapes it."""
    return f"view={view},keep_interpreter={int(keep_interpreter)}"


def encode(page: dict[str, Any]) -> bytes:
    """The answer as the UI sends it (`routes.json_response`'s separators)."""
    return json.dumps(page, separators=(",", ":"), default=str).encode()


def load(
    conn: Connection, info: SessionInfo, view: str, keep_interpreter: bool
) -> dict[str, Any] | None:
    """The stored whole-session graph of a final session, or None (not stored, stale or
    not readable: then it is built)."""
    body = read_body(conn, info, PreparedFlameRow, key(view, keep_interpreter))
    if body is None:
        return None
    try:
        page = json.loads(body)
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError both
        log.warning("prepared flame graph of session %d ignored: %s", info.id, exc)
        return None
    if not isinstance(page, dict) or page.get("initial") != view:
        log.warning("prepared flame graph of session %d ignored: not a %s graph", info.id, view)
        return None
    return page


def save(
    engine: Engine, info: SessionInfo, view: str, keep_interpreter: bool, page: dict[str, Any]
) -> bool:
    """Store a final session's whole-session graph; True when stored (failures are
    logged by `write_body`, never raised)."""
    return write_body(engine, info, PreparedFlameRow, key(view, keep_interpreter), encode(page))
