"""Session rows: the one module that creates, finishes, annotates and reads `sessions`.

`kubeprof record` creates a local session (a taken name gets a suffix); the operator
ensures a cluster session (idempotent by name, so a restarted operator finds its row).
Both finish it and merge entries into its JSON `meta` through the same functions.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any, TypedDict

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Connection

from kubeprof.protocol.settings import DEFAULT_CPU_HZ
from kubeprof.storage.bulk import dialect_insert
from kubeprof.storage.models import SampleRow, SessionRow


def _row(
    name: str,
    *,
    kind: str,
    command: str,
    hz: int,
    host: str,
    started_at: datetime,
    start_ns: int,
    meta: Mapping[str, str] | None,
    conn: Connection,
) -> dict[str, Any]:
    # Its samples will all have higher ids (they are inserted after it exists): starting
    # its count watermark there keeps what readers add past it to its own samples.
    newest = conn.scalar(select(func.max(SampleRow.id)))
    return {
        "counted_sample_id": int(newest or 0),
        "name": name,
        "kind": kind,
        "command": command,
        "hz": hz,
        "host": host,
        "status": "running",
        "started_at": started_at,
        "ended_at": None,
        "start_ns": start_ns,
        "end_ns": 0,
        "meta": json.dumps(dict(meta or {}), sort_keys=True),
    }


class NewSession(TypedDict, total=False):
    """The optional fields of a new session, as `create` takes them (Store passes them on)."""

    kind: str
    command: str
    hz: int
    start_ns: int
    meta: Mapping[str, str] | None


def create(
    conn: Connection,
    name: str,
    *,
    kind: str = "local",
    command: str = "",
    hz: int = DEFAULT_CPU_HZ,
    start_ns: int = 0,
    meta: Mapping[str, str] | None = None,
) -> int:
    """A new session row; a taken name gets a numeric suffix ("run", "run-2"). Its id."""
    taken = set(conn.scalars(select(SessionRow.name).where(SessionRow.name.like(f"{name}%"))))
    final, n = name, 1
    while final in taken:
        n += 1
        final = f"{name}-{n}"
    row = _row(
        final,
        kind=kind,
        command=command,
        hz=hz,
        host=socket.gethostname(),
        started_at=datetime.now(UTC),
        start_ns=start_ns,
        meta=meta,
        conn=conn,
    )
    return int(conn.execute(insert(SessionRow).returning(SessionRow.id), [row]).scalar_one())


def ensure(
    conn: Connection,
    name: str,
    *,
    kind: str,
    command: str,
    hz: int,
    started_at: datetime,
    meta: Mapping[str, str] | None = None,
) -> int:
    """The id of the session named `name`, creating its row on first call (idempotent)."""
    row = _row(
        name,
        kind=kind,
        command=command,
        hz=hz,
        host="",
        started_at=started_at,
        start_ns=0,
        meta=meta,
        conn=conn,
    )
    conn.execute(
        dialect_insert(conn, SessionRow)
        .values(**row)
        .on_conflict_do_nothing(index_elements=["name"])
    )
    return int(conn.execute(select(SessionRow.id).where(SessionRow.name == name)).scalar_one())


def finish(
    conn: Connection,
    session_id: int,
    status: str,
    *,
    end_ns: int | None = None,
    meta: Mapping[str, str] | None = None,
) -> None:
    """Mark a session ended with `status`; `end_ns` kept unless given; `meta` merged in."""
    values: dict[str, Any] = {"status": status, "ended_at": datetime.now(UTC)}
    if end_ns is not None:
        values["end_ns"] = end_ns
    if meta:
        values["meta"] = _merged(conn, session_id, meta)
    conn.execute(update(SessionRow).where(SessionRow.id == session_id).values(**values))


def mark_deleted(conn: Connection, name: str) -> bool:
    """The session named `name`, if still running, marked `deleted` (its owner removed it
    before it ended); True when a row changed. Ended sessions keep their status."""
    res = conn.execute(
        update(SessionRow)
        .where(SessionRow.name == name, SessionRow.status == "running")
        .values(status="deleted", ended_at=datetime.now(UTC))
    )
    return bool(res.rowcount)


def merge_meta(conn: Connection, session_id: int, meta: Mapping[str, str]) -> None:
    """Merge entries into the session's meta (later values win)."""
    conn.execute(
        update(SessionRow)
        .where(SessionRow.id == session_id)
        .values(meta=_merged(conn, session_id, meta))
    )


def read_meta(conn: Connection, session_id: int) -> dict[str, str]:
    """The session's meta as a dict ({} for an unknown id)."""
    return json.loads(
        conn.scalar(select(SessionRow.meta).where(SessionRow.id == session_id)) or "{}"
    )


def _merged(conn: Connection, session_id: int, meta: Mapping[str, str]) -> str:
    return json.dumps({**read_meta(conn, session_id), **dict(meta)}, sort_keys=True)


def name_of(conn: Connection, session_id: int) -> str:
    """The session's name as stored (`create` may have suffixed the one asked for)."""
    return str(conn.scalar(select(SessionRow.name).where(SessionRow.id == session_id)))


def remove(conn: Connection, session_ids: Collection[int]) -> int:
    """Delete sessions with all their rows (samples, GPU records, ... cascade by foreign
    key, stack_counts by a trigger); interned stacks and frames stay, as other sessions may
    share them. How many."""
    if not session_ids:
        return 0
    result = conn.execute(delete(SessionRow).where(SessionRow.id.in_(list(session_ids))))
    return int(result.rowcount or 0)
