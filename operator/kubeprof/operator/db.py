"""The operator's writes to the results database: session rows and idempotent batches.

Session rows go through `kubeprof.storage.sessions` (shared with `kubeprof record`); this
module only names a ProfilingSession's row and opens the transactions.

A batch is stored in one transaction together with its row in `ingested_batches`; the id
row goes first with ON CONFLICT DO NOTHING, so a retried batch (the agent never heard the
answer, or the operator restarted) is recognised and skipped, and a batch whose
transaction failed leaves no trace and is simply sent again.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import bindparam, func, select, text
from sqlalchemy.engine import Connection, Engine

from kubeprof.model import Batch
from kubeprof.operator.compactor import Compactor
from kubeprof.storage import compaction, sessions
from kubeprof.storage.batch_tx import BatchTx
from kubeprof.storage.intern import Interner
from kubeprof.storage.models import (
    GpuActivityRow,
    GpuMetricRow,
    IngestedBatchRow,
    OffCpuSampleRow,
    SampleRow,
)
from kubeprof.storage.store import hold, write_batch


def store_name(namespace: str, name: str, uid: str) -> str:
    """The sessions.name of a ProfilingSession: unique even when a name is reused."""
    return f"{namespace}/{name}@{uid[:8]}"


def ensure_session(
    engine: Engine,
    namespace: str,
    name: str,
    uid: str,
    *,
    hz: int,
    started_at: datetime,
    meta: Mapping[str, str],
) -> int:
    """The session's row id, creating the row on first call (idempotent)."""
    with engine.begin() as conn:
        return sessions.ensure(
            conn,
            store_name(namespace, name, uid),
            kind="cluster",
            command=f"ProfilingSession {namespace}/{name}",
            hz=hz,
            started_at=started_at,
            meta=meta,
        )


def mark_deleted(engine: Engine, namespace: str, name: str, uid: str) -> bool:
    """A deleted ProfilingSession still running in the database is marked `deleted`
    (its records stay for reports); True when a row was changed."""
    with engine.begin() as conn:
        return sessions.mark_deleted(conn, store_name(namespace, name, uid))


def merge_meta(engine: Engine, session_id: int, meta: Mapping[str, str]) -> None:
    """Merge entries into sessions.meta (e.g. pod UID -> pod name, kept for the reports)."""
    with engine.begin() as conn:
        sessions.merge_meta(conn, session_id, meta)


def session_meta(conn: Connection, session_id: int) -> dict[str, str]:
    return sessions.read_meta(conn, session_id)


def finish_session(engine: Engine, session_id: int, status: str) -> None:
    """End the session's row and count its samples (a failed session is not aggregated,
    so nothing else would: readers would add them at every read)."""
    with engine.begin() as conn:
        sessions.finish(conn, session_id, status)
    compaction.compact(engine, session_id)


INTERNER_MAX = 500_000  # cached frame + stack ids per writer thread (~100 B each)


@dataclass(frozen=True, slots=True)
class Stored:
    """What storing one batch did."""

    duplicate: bool  # the id was stored before; nothing written now
    rows: int  # rows written now (or written the first time, for a duplicate)


class BatchWriter:
    """Writes batches idempotently; safe to call from several threads at once."""

    def __init__(self, engine: Engine, *, compact_every_s: float = 1.0) -> None:
        self.engine = engine
        self._local = threading.local()
        # Samples are counted into stack_counts after their batch, off the request path.
        self.compactor = Compactor(engine, compact_every_s)

    def _interner(self) -> Interner:
        it = getattr(self._local, "interner", None)
        # The cache grows with every distinct stack a client sends: start over past the
        # cap (ids are then looked up again), so no client can grow it without bound.
        if it is None or len(it.stack_ids) + len(it.frame_ids) > INTERNER_MAX:
            it = self._local.interner = Interner()
        return it

    def store(
        self,
        session_id: int,
        batch_id: str,
        agent: str,
        batch: Batch,
        *,
        committing: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
        interned: Callable[[int, int], None] = lambda _frames, _stacks: None,
    ) -> Stored:
        """Store `batch` once per (session, batch id). The commit runs inside
        `committing()`, which may refuse it (the session was sealed meanwhile);
        `interned(frames, stacks)` is told what the batch added to the shared tables
        before that and may refuse it too (a quota): nothing of it is then committed."""
        interner = self._interner()
        try:
            with self.engine.connect() as conn, conn.begin() as tx:
                bt = BatchTx(conn)
                claim = {
                    "s": session_id,
                    "b": batch_id,
                    "a": agent,
                    "t": datetime.now(UTC),
                }
                # The id row first, locks after, in one round trip (`store.hold`); a
                # RETURNING row, not rowcount: psycopg reports no count for DO NOTHING.
                (claimed,), held = hold(bt, session_id, batch, [(_CLAIM, claim)])
                if claimed is None:
                    prev = conn.scalar(
                        select(IngestedBatchRow.rows).where(
                            IngestedBatchRow.session_id == session_id,
                            IngestedBatchRow.batch_id == batch_id,
                        )
                    )
                    return Stored(True, int(prev or 0))
                frames0, stacks0 = interner.added_frames, interner.added_stacks
                rows = write_batch(conn, interner, session_id, batch, node=agent, bt=bt, held=held)
                frames = interner.added_frames - frames0
                stacks = interner.added_stacks - stacks0
                interned(frames, stacks)
                bt.later(
                    _COUNTED,
                    [{"s": session_id, "b": batch_id, "r": rows, "f": frames, "k": stacks}],
                )
                with committing():
                    bt.commit(tx)  # with the statements left queued: one round trip
            self.compactor.note(session_id)
            return Stored(False, rows)
        except BaseException:
            # Ids interned inside a rolled-back transaction do not exist: forget them all.
            self._local.interner = Interner()
            raise


_T = IngestedBatchRow.__tablename__
# The batch's id row, claimed before anything of it is written (a retry finds it and
# stops); its counts are filled in with the commit.
_CLAIM = text(
    f"INSERT INTO {_T} (session_id, batch_id, agent, rows, frames, stacks, received_at) "
    "VALUES (:s, :b, :a, 0, 0, 0, :t) ON CONFLICT (session_id, batch_id) DO NOTHING "
    "RETURNING batch_id"
).bindparams(bindparam("t", type_=IngestedBatchRow.__table__.c.received_at.type))
_COUNTED = text(
    f"UPDATE {_T} SET rows = :r, frames = :f, stacks = :k WHERE session_id = :s AND batch_id = :b"
)


def known_origins(engine: Engine, session_id: int) -> tuple[set[str], set[str]]:
    """Nodes that delivered batches and pods the reconciler recorded, for a session: what
    an operator restarted mid-session knows of the session's past targets."""
    with engine.connect() as conn:
        nodes = set(
            conn.scalars(
                select(IngestedBatchRow.agent)
                .where(IngestedBatchRow.session_id == session_id)
                .distinct()
            )
        )
        pods = {
            k.removeprefix("pod:")
            for k in sessions.read_meta(conn, session_id)
            if k.startswith("pod:")
        }
    return nodes, pods


def session_usage(
    engine: Engine, session_id: int
) -> tuple[tuple[int, int, int], dict[str, tuple[int, int]]]:
    """Records stored for a session and the frames and stacks it added to the shared
    tables, and each node's earliest and latest timestamp: what bounds its next batches
    after an operator restart (`kubeprof.operator.usage`)."""
    extents: dict[str, tuple[int, int]] = {}
    with engine.connect() as conn:
        used = conn.execute(
            select(
                *(
                    func.coalesce(func.sum(c), 0)
                    for c in (
                        IngestedBatchRow.rows,
                        IngestedBatchRow.frames,
                        IngestedBatchRow.stacks,
                    )
                )
            ).where(IngestedBatchRow.session_id == session_id)
        ).one()
        for table, lo, hi in (
            (SampleRow, SampleRow.ts_ns, SampleRow.ts_ns),
            (GpuActivityRow, GpuActivityRow.start_ns, GpuActivityRow.end_ns),
            (GpuMetricRow, GpuMetricRow.ts_ns, GpuMetricRow.ts_ns),
            (
                OffCpuSampleRow,
                OffCpuSampleRow.ts_ns,
                OffCpuSampleRow.ts_ns + OffCpuSampleRow.blocked_ns,
            ),
        ):
            for node, first, last in conn.execute(
                select(table.node, func.min(lo), func.max(hi))
                .where(table.session_id == session_id)
                .group_by(table.node)
            ):
                if first is None:
                    continue
                old = extents.get(node)
                extents[node] = (
                    (first, last) if old is None else (min(old[0], first), max(old[1], last))
                )
    return (int(used[0]), int(used[1]), int(used[2])), extents
