"""The sessions list: one row per stored session, from cheap per-session queries.

Counts come from `stack_counts` session totals and the processes table, GPU idle and the
top finding from the operator's session-end aggregate, else from an analysed summary in the
cache (local sessions have no aggregate). Nothing here reads the sample rows.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from kubeprof.storage import queries as q
from kubeprof.storage.models import ProcessRow, SessionAggregateRow
from kubeprof.storage.stack_counts import session_totals
from kubeprof.ui.refs import ref_of
from kubeprof.ui.summary import PAGE, Cache


def _aggregates(conn: Connection) -> dict[int, tuple[float | None, str]]:
    """session id -> (GPU idle, top finding) from the operator's session-end rows."""
    out: dict[int, tuple[float | None, str]] = {}
    t = SessionAggregateRow
    rows = conn.execute(
        select(t.session_id, t.gpu_idle_ratio, t.detail).where(t.scope == "session")
    )
    for sid, idle, detail in rows:
        d = json.loads(detail or "{}")
        findings = d.get("findings") or []
        out[sid] = (idle, d.get("top_finding") or (findings[0]["message"] if findings else ""))
    return out


def _pod_counts(conn: Connection) -> dict[int, int]:
    """session id -> pods whose processes were seen (known while the session still runs)."""
    q2 = (
        select(ProcessRow.session_id, func.count(ProcessRow.pod_uid.distinct()))
        .where(ProcessRow.pod_uid != "")
        .group_by(ProcessRow.session_id)
    )
    return {int(sid): int(n) for sid, n in conn.execute(q2)}


def _nodes_and_samples(conn: Connection) -> dict[int, tuple[int, int]]:
    """session id -> (nodes with CPU samples, CPU samples), from the session totals."""
    totals = session_totals(conn)
    return {sid: (len(nodes), sum(nodes.values())) for sid, nodes in totals.items()}


def sessions(conn: Connection, cache: Cache | None = None) -> dict[str, Any]:
    """Every session, newest first, with what the list page shows."""
    aggs = _aggregates(conn)
    pods = _pod_counts(conn)
    counts = _nodes_and_samples(conn)
    now = datetime.now(UTC)
    out = []
    for s in reversed(q.list_sessions(conn, counts=False)):
        ns, name = ref_of(s)
        idle, top = aggs.get(s.id, (None, ""))
        cached = (cache.get(s, PAGE) or cache.get(s)) if cache is not None else None
        if cached is not None and not top:
            idle, top = cached["gpuIdle"], cached["topFinding"]
        started = s.started_at if s.started_at.tzinfo else s.started_at.replace(tzinfo=UTC)
        nodes, samples = counts.get(s.id, (0, 0))
        out.append(
            {
                "namespace": ns,
                "name": name,
                "kind": s.kind,
                "phase": s.status,
                "nodes": nodes,
                "pods": pods.get(s.id, 0),
                "samples": samples,
                "gpuIdle": idle,
                "topFinding": top,
                "startedAt": started.isoformat(),
                "ageSeconds": int((now - started).total_seconds()),
                "durationSeconds": round(s.duration_s, 3),
            }
        )
    return {"sessions": out}
