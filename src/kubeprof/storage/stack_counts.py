"""Pre-counted CPU stacks (`stack_counts`): written with each batch, read by flame graphs.

A flame graph needs samples per (thread, stack), not per sample. Counting them once as
batches arrive makes its query read rows in proportion to distinct stacks, so it stays
fast at 10 M samples; the per-sample rows stay for timelines and GPU correlation.
Rows are added to with ON CONFLICT DO UPDATE (several ingest writers may add to one row
at once), in key order so two writers never wait on each other in a cycle.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.engine import Connection

from kubeprof.storage.bulk import dialect_insert
from kubeprof.storage.models import StackCountRow

TOTAL_BUCKET = -1  # the whole-session row of a (thread, stack)
BUCKET_NS = 1_000_000_000  # time buckets of 1 s: a time range is rounded out to them

# (bucket, node, pid, tid, stack_id) -> (thread, samples)
CountKey = tuple[int, str, int, int, int]


def bucket_of(ts_ns: int) -> int:
    """The time bucket of a sample timestamp (the node's CLOCK_MONOTONIC)."""
    return ts_ns // BUCKET_NS


def count_rows(
    session_id: int,
    node: str,
    samples: Iterable[tuple[int, int, int, str, int]],
) -> list[dict[str, object]]:
    """Rows to add for samples given as (ts_ns, pid, tid, thread, stack_id): one per
    (thread, stack) for the session total and one per (time bucket, thread, stack)."""
    counts: Counter[CountKey] = Counter()
    threads: dict[tuple[int, int], str] = {}
    for ts_ns, pid, tid, thread, stack_id in samples:
        counts[(TOTAL_BUCKET, node, pid, tid, stack_id)] += 1
        counts[(bucket_of(ts_ns), node, pid, tid, stack_id)] += 1
        threads[(pid, tid)] = thread
    return [
        {
            "session_id": session_id,
            "bucket": b,
            "node": n,
            "pid": p,
            "tid": t,
            "stack_id": s,
            "thread": threads[(p, t)],
            "samples": c,
        }
        for (b, n, p, t, s), c in sorted(counts.items())
    ]


_KEY = ("session_id", "bucket", "node", "pid", "tid", "stack_id")
_COLUMNS = (*_KEY, "thread", "samples")


def add_counts(conn: Connection, rows: list[dict[str, object]]) -> None:
    """Add `rows` (from `count_rows`, in key order) to the stored counts."""
    if not rows:
        return
    ins = dialect_insert(conn, StackCountRow)
    stmt = ins.on_conflict_do_update(
        index_elements=list(_KEY),
        set_={
            "samples": StackCountRow.samples + ins.excluded.samples,
            "thread": ins.excluded.thread,
        },
    )
    for i in range(0, len(rows), 2000):
        conn.execute(stmt, rows[i : i + 2000])


def add_staged(
    conn: Connection,
    stage: str,
    session_id: int,
    node: str,
    threads: Mapping[tuple[int, int], str],
) -> None:
    """PostgreSQL: add the counts of the sample rows in the table `stage` (one batch's, all
    of `session_id` and `node`), counted by the server in one upsert; `threads` names each
    (pid, tid) as the batch last did, as `count_rows` does. Counting in Python and COPYing
    ~2 count rows per sample cost more than the sample rows themselves. Grouped and sorted
    on integers only (text keys made the sorts a third of the statement); with one session
    and node that is key order, so concurrent writers never wait on each other in a cycle.
    Bucket numbers are `bucket_of` (timestamps are never negative: the codec refuses them
    and the agents' clocks are monotonic)."""
    t = StackCountRow.__tablename__
    conn.exec_driver_sql(
        f"INSERT INTO {t} ({', '.join(_COLUMNS)}) "
        f"SELECT %(session)s::integer, COALESCE(c.b, {TOTAL_BUCKET}), %(node)s::text, c.pid, "
        "c.tid, c.stack_id, n.thread, c.samples FROM ("
        "SELECT b, pid, tid, stack_id, count(*) AS samples "
        f"FROM (SELECT ts_ns / {BUCKET_NS} AS b, pid, tid, stack_id FROM {stage}) s "
        "GROUP BY GROUPING SETS ((b, pid, tid, stack_id), (pid, tid, stack_id))) c "
        "JOIN unnest(%(pid)s::integer[], %(tid)s::integer[], %(thread)s::text[]) "
        "AS n (pid, tid, thread) ON n.pid = c.pid AND n.tid = c.tid "
        f"ORDER BY COALESCE(c.b, {TOTAL_BUCKET}), c.pid, c.tid, c.stack_id "
        f"ON CONFLICT ({', '.join(_KEY)}) DO UPDATE SET "
        f"samples = {t}.samples + EXCLUDED.samples, thread = EXCLUDED.thread",
        {
            "session": session_id,
            "node": node,
            "pid": [p for p, _ in threads],
            "tid": [td for _, td in threads],
            "thread": list(threads.values()),
        },
    )


def stack_counts(
    conn: Connection,
    session_id: int,
    *,
    buckets: tuple[int, int] | None = None,
    pids: Collection[tuple[str, int]] | None = None,
) -> list[tuple[str, int, int, str, int, int]]:
    """(node, pid, tid, thread, stack_id, samples) of a session: the whole session, or the
    time buckets ``buckets`` (first, last inclusive); only the (node, pid)s in `pids`."""
    t = StackCountRow
    conds: list[ColumnElement[bool]] = [t.session_id == session_id]
    if buckets is None:
        conds.append(t.bucket == TOTAL_BUCKET)
    else:
        conds += [t.bucket >= max(buckets[0], 0), t.bucket <= buckets[1]]
    if pids is not None:
        if not pids:
            return []
        conds.append(or_(*(and_(t.node == n, t.pid == p) for n, p in sorted(pids))))
    if buckets is None:
        q = select(t.node, t.pid, t.tid, t.thread, t.stack_id, t.samples).where(*conds)
        from kubeprof.storage.bulk_read import driver_rows  # a read helper, for reads only

        return driver_rows(conn, q)  # plain tuples: 100,000 rows in a third of the time
    q2 = (
        select(t.node, t.pid, t.tid, func.max(t.thread), t.stack_id, func.sum(t.samples))
        .where(*conds)
        .group_by(t.node, t.pid, t.tid, t.stack_id)
    )
    return [(n, int(p), int(td), th, int(s), int(c)) for n, p, td, th, s, c in conn.execute(q2)]
