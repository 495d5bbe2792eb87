"""Read-side queries `kubeprof compare` needs beyond `storage.queries`: the recording host and
the power/energy readings per node (GPU ordinals repeat across nodes).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.engine import Connection

from kubeprof.model import GpuMetricSample
from kubeprof.storage.models import GpuMetricRow, SessionRow

ENERGY_METRICS = ("energy_mj", "power_mw")


def session_host(conn: Connection, session_id: int) -> str:
    """The host name that created the session row ("" when not stored)."""
    return conn.scalar(select(SessionRow.host).where(SessionRow.id == session_id)) or ""


def energy_metrics_by_node(
    conn: Connection,
    session_id: int,
) -> dict[str, list[GpuMetricSample]]:
    """Device-wide energy-counter and power readings per node, in time order."""
    t = GpuMetricRow.__table__
    q = (
        select(t)
        .where(t.c.session_id == session_id, t.c.metric.in_(ENERGY_METRICS), t.c.pid == 0)
        .order_by(t.c.ts_ns, t.c.id)
    )
    out: dict[str, list[GpuMetricSample]] = {}
    for r in conn.execute(q):
        out.setdefault(r.node, []).append(
            GpuMetricSample(
                ts_ns=r.ts_ns, device=r.device, metric=r.metric, value=r.value, pid=r.pid
            )
        )
    return out
