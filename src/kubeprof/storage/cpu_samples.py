"""One batch's CPU sample rows: written alone, counted later.

On PostgreSQL the rows are COPYed straight into `samples`, as raw COPY would. The batch
holds its session's sample-writers lock shared while it does (`compaction.hold_writing`),
so a compaction knows which ids are settled. `stack_counts` is not written here: counting
in the batch's transaction (about two upserted count rows per sample) cost as much as the
samples themselves; `kubeprof.storage.compaction` counts them after.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import insert
from sqlalchemy.engine import Connection

from kubeprof.storage import compaction
from kubeprof.storage.bulk import copies, copy_tuples
from kubeprof.storage.models import SampleRow

COLUMNS = ("session_id", "node", "ts_ns", "pid", "tid", "cpu", "thread", "stack_id")
# (session_id, node, ts_ns, pid, tid, cpu, thread, stack_id): one session and node a call
SampleTuple = tuple[int, str, int, int, int, int, str, int]


def write(conn: Connection, rows: Sequence[SampleTuple], *, held: bool = False) -> None:
    """Store `rows` (one batch: one session and node); `compaction` counts them later.
    `held`: the transaction holds the session's writers lock already (`batch_tx`)."""
    if not rows:
        return
    if not held:
        compaction.hold_writing(conn, rows[0][0])
    if copies(conn):
        copy_tuples(conn, SampleRow.__tablename__, COLUMNS, rows)
        return
    conn.execute(insert(SampleRow), [dict(zip(COLUMNS, r, strict=True)) for r in rows])
