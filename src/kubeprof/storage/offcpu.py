"""Off-CPU samples in the store: written with a batch, read back as weighted stacks.

A wait is drawn as its stack with one more leaf frame naming why it waited (the blocking
syscall or thread state), so a flame graph splits `read` from `futex` under the same
Python line, as offcputime-style flame graphs do.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from kubeprof.model import Frame, FrameKind, OffCpuSample, Stack, stack_hash
from kubeprof.reportdata import WeightedStack
from kubeprof.storage.bulk import insert_rows
from kubeprof.storage.intern import Interner, load_stacks
from kubeprof.storage.models import OffCpuSampleRow, ProcessRow


def write(
    conn: Connection,
    interner: Interner,
    session_id: int,
    node: str,
    samples: Sequence[OffCpuSample],
    *,
    epoch: int | None = None,
) -> int:
    """Insert `samples` on an open transaction; returns the rows written. `epoch`: the
    transaction holds the interning lock already (`Interner.hashed_ids_for`)."""
    if not samples:
        return 0
    stacks = {stack_hash(s.stack): s.stack for s in samples if s.stack}
    ids = interner.hashed_ids_for(conn, stacks, epoch=epoch) if stacks else {}
    # The off_cpu_samples columns; they start like store's samples rows by schema design.
    rows = [
        {
            "session_id": session_id,
            "node": node,
            "ts_ns": s.ts_ns,
            "pid": s.pid,
            "tid": s.tid,
            "thread": s.thread,
            "blocked_ns": s.blocked_ns,
            "weight_ns": s.weight_ns,
            "reason": s.reason,
            "source": s.source,
            "stack_id": ids[stack_hash(s.stack)] if s.stack else None,
        }
        for s in samples
    ]
    insert_rows(conn, OffCpuSampleRow, rows)
    return len(rows)


def wait_frame(reason: str) -> Frame:
    """The leaf frame that names a wait's reason in off-CPU flame graphs."""
    return Frame(name=f"[off-cpu] {reason or 'unknown'}", kind=FrameKind.KERNEL)


# Keyword-only filters as queries.cpu_stacks takes them: alike signature, another table.
def offcpu_stacks(
    conn: Connection,
    session_id: int,
    *,
    span_ns: tuple[int, int] | None = None,
    pids: Collection[tuple[str, int]] | None = None,
) -> tuple[WeightedStack, ...]:
    """Waits grouped by (node, stack, pid, tid, thread, reason): count and wall time; of
    the waits starting in ``span_ns`` [lo, hi) and of the (node, pid)s ``pids`` if given."""
    t = OffCpuSampleRow
    q = (
        select(
            t.node,
            t.stack_id,
            t.pid,
            t.tid,
            func.max(t.thread),
            t.reason,
            func.count(),
            func.sum(t.weight_ns),
        )
        .where(t.session_id == session_id)
        .group_by(t.node, t.stack_id, t.pid, t.tid, t.reason)
    )
    if span_ns is not None:
        q = q.where(t.ts_ns >= span_ns[0], t.ts_ns < span_ns[1])
    rows: list[Any] = [tuple(r) for r in conn.execute(q)]
    if pids is not None:
        rows = [r for r in rows if (r[0], r[2]) in pids]
    stacks = load_stacks(conn, (r[1] for r in rows if r[1] is not None))
    names = {
        (r.node, r.pid): (r.name or r.cmdline.split(" ", 1)[0])
        for r in conn.execute(
            select(ProcessRow.node, ProcessRow.pid, ProcessRow.name, ProcessRow.cmdline).where(
                ProcessRow.session_id == session_id
            )
        )
    }
    out = []
    for node, stack_id, pid, tid, thread, reason, n, weight in rows:
        stack: Stack = stacks[stack_id] if stack_id is not None else ()
        out.append(
            WeightedStack(
                stack=(*stack, wait_frame(reason)),
                pid=pid,
                tid=tid,
                thread=thread,
                process=names.get((node, pid)) or str(pid),
                samples=int(n),
                value_ns=int(weight or 0),
            )
        )
    return tuple(out)


def offcpu_samples(
    conn: Connection, session_id: int, node: str | None = None
) -> list[OffCpuSample]:
    """Every off-CPU sample of a session (of one node, if given) in time order, stacks
    included (for analyses that line waits up with GPU idle time)."""
    t = OffCpuSampleRow
    where = [t.session_id == session_id] + ([t.node == node] if node is not None else [])
    rows = list(
        conn.execute(
            select(
                t.ts_ns,
                t.pid,
                t.tid,
                t.thread,
                t.blocked_ns,
                t.weight_ns,
                t.reason,
                t.source,
                t.stack_id,
            )
            .where(*where)
            .order_by(t.ts_ns, t.id)
        )
    )
    stacks = load_stacks(conn, (r.stack_id for r in rows if r.stack_id is not None))
    return [
        OffCpuSample(
            r.ts_ns,
            r.pid,
            r.tid,
            r.thread,
            r.blocked_ns,
            r.weight_ns,
            r.reason,
            r.source,
            stacks[r.stack_id] if r.stack_id is not None else (),
        )
        for r in rows
    ]
