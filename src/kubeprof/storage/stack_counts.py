"""Pre-counted CPU stacks (`stack_counts`), read by flame graphs and the sessions list.

A flame graph needs samples per (thread, stack), not per sample. Counting them once makes
its query read rows in proportion to distinct stacks, so it stays fast at 10 M samples;
the per-sample rows stay for timelines and GPU correlation. The counting runs after the
batches (`kubeprof.storage.compaction`, behind the watermark `sessions.counted_sample_id`);
every read here adds the samples past the watermark, in the same statement (one snapshot),
so it answers the same whether compaction ran, ran half or not at all.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import (
    ColumnElement,
    Integer,
    and_,
    case,
    func,
    literal_column,
    or_,
    select,
    text,
    union_all,
)
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.engine import Connection
from sqlalchemy.orm import InstrumentedAttribute

from kubeprof.storage.models import SampleRow, SessionRow, StackCountRow

TOTAL_BUCKET = -1  # the whole-session row of a (thread, stack)
BUCKET_NS = 1_000_000_000  # time buckets of 1 s: a time range is rounded out to them


def bucket_of(ts_ns: int) -> int:
    """The time bucket of a sample timestamp (the node's CLOCK_MONOTONIC)."""
    return ts_ns // BUCKET_NS


_RETRIES = 4  # reads with a literal watermark before one that reads it in the statement

Row = tuple[str, int, int, str, int, int]


def _mark(conn: Connection, session_id: int) -> int | None:
    return conn.scalar(select(SessionRow.counted_sample_id).where(SessionRow.id == session_id))


def _pid_filter(
    node: InstrumentedAttribute[str],
    pid: InstrumentedAttribute[int],
    pids: Collection[tuple[str, int]],
) -> ColumnElement[bool]:
    return or_(*(and_(node == n, pid == p) for n, p in sorted(pids)))


def _newest_thread(conn: Connection) -> ColumnElement[str] | InstrumentedAttribute[str]:
    """The thread name of a group's newest sample (what compaction stores for it)."""
    if conn.dialect.name == "postgresql":
        agg = func.array_agg(aggregate_order_by(SampleRow.thread, SampleRow.id.desc()))
        return agg[1]
    return SampleRow.thread  # SQLite: a bare column beside max(id) is from that row


def _read(
    conn: Connection,
    session_id: int,
    mark: int | ColumnElement[int],
    buckets: tuple[int, int] | None,
    pids: Collection[tuple[str, int]] | None,
) -> list[Row]:
    """Counted rows plus the samples past `mark` grouped alike (per bucket: a sample's
    thread name wins over a counted one, being newer), in one statement."""
    t, s = StackCountRow, SampleRow
    counted: list[ColumnElement[bool]] = [t.session_id == session_id]
    fresh: list[ColumnElement[bool]] = [s.session_id == session_id, s.id > mark]
    bucket: ColumnElement[int] = literal_column(str(TOTAL_BUCKET), Integer)
    by: list[ColumnElement[int]] = []  # not GROUP BY -1: SQLite reads that as a position
    if buckets is None:
        counted.append(t.bucket == TOTAL_BUCKET)
    else:
        lo, hi = max(buckets[0], 0), buckets[1]
        counted += [t.bucket >= lo, t.bucket <= hi]
        fresh += [s.ts_ns >= lo * BUCKET_NS, s.ts_ns < (hi + 1) * BUCKET_NS]
        bucket = s.ts_ns // BUCKET_NS  # timestamps are never negative
        by = [bucket]
    if pids is not None:
        counted.append(_pid_filter(t.node, t.pid, pids))
        fresh.append(_pid_filter(s.node, s.pid, pids))
    both = union_all(
        select(
            t.bucket.label("b"),
            t.node,
            t.pid,
            t.tid,
            t.stack_id,
            t.thread.label("thread"),
            t.samples.label("n"),
            literal_column("0", Integer).label("new"),
            literal_column("0", Integer).label("last"),
        ).where(*counted),
        select(
            bucket.label("b"),
            s.node,
            s.pid,
            s.tid,
            s.stack_id,
            _newest_thread(conn).label("thread"),
            func.count(),
            literal_column("1", Integer),
            func.max(s.id),
        )
        .where(*fresh)
        .group_by(*by, s.node, s.pid, s.tid, s.stack_id),
    ).subquery()
    c = both.c
    per_bucket = (
        select(
            c.node,
            c.pid,
            c.tid,
            c.stack_id,
            func.coalesce(func.max(case((c.new == 1, c.thread))), func.max(c.thread)).label(
                "thread"
            ),
            func.sum(c.n).label("n"),
        )
        .group_by(c.b, c.node, c.pid, c.tid, c.stack_id)
        .subquery()
    )
    k = per_bucket.c
    # Ordered: a hash aggregate hands groups out in an order that changes with the plan (a
    # table analysed between two reads), and the stacks' order reaches the flame graph's
    # bytes (a stored graph then differed from the one built again).
    key = (k.node, k.pid, k.tid, k.stack_id)
    q = (
        select(k.node, k.pid, k.tid, func.max(k.thread), k.stack_id, func.sum(k.n))
        .group_by(*key)
        .order_by(*key)
    )
    return [(n, int(p), int(td), th, int(st), int(x)) for n, p, td, th, st, x in conn.execute(q)]


def stack_counts(
    conn: Connection,
    session_id: int,
    *,
    buckets: tuple[int, int] | None = None,
    pids: Collection[tuple[str, int]] | None = None,
) -> list[Row]:
    """(node, pid, tid, thread, stack_id, samples) of a session: the whole session, or the
    time buckets ``buckets`` (first, last inclusive); only the (node, pid)s in `pids`.
    Counted rows plus the samples not counted yet. The watermark goes in as a number (the
    planner then reads only the samples past it) and is read again after: a compaction
    that committed meanwhile raised it, and the read is repeated."""
    if pids is not None and not pids:
        return []
    for _ in range(_RETRIES):
        mark = _mark(conn, session_id)
        if mark is None:
            return []
        rows = _read(conn, session_id, int(mark), buckets, pids)
        if _mark(conn, session_id) == mark:
            return rows
    inline = select(SessionRow.counted_sample_id).where(SessionRow.id == session_id)
    return _read(conn, session_id, inline.scalar_subquery(), buckets, pids)


def _totals_sql(conn: Connection) -> str:
    """Per session: its whole-session count rows and its samples past its own watermark,
    each found through the session's key (stack_counts' primary key, samples'
    (session_id, id)), so a session costs its own rows, never another's. PostgreSQL runs
    the LATERAL per session; SQLite's CROSS JOIN keeps sessions the outer loop."""
    own = (
        f"SELECT c.node AS node, c.samples AS n FROM {StackCountRow.__tablename__} c "
        f"WHERE c.session_id = x.id AND c.bucket = {TOTAL_BUCKET} UNION ALL "
        f"SELECT s.node, count(*) FROM {SampleRow.__tablename__} s "
        "WHERE s.session_id = x.id AND s.id > x.counted_sample_id GROUP BY s.node"
    )
    x = SessionRow.__tablename__
    if conn.dialect.name == "postgresql":
        return (
            f"SELECT x.id, t.node, sum(t.n) FROM {x} x CROSS JOIN LATERAL ({own}) t "
            "GROUP BY x.id, t.node"
        )
    counted = (
        f"SELECT x.id AS sid, c.node AS node, c.samples AS n FROM {x} x "
        f"CROSS JOIN {StackCountRow.__tablename__} c "
        f"WHERE c.session_id = x.id AND c.bucket = {TOTAL_BUCKET}"
    )
    fresh = (
        f"SELECT x.id, s.node, count(*) FROM {x} x CROSS JOIN {SampleRow.__tablename__} s "
        "WHERE s.session_id = x.id AND s.id > x.counted_sample_id GROUP BY x.id, s.node"
    )
    return f"SELECT sid, node, sum(n) FROM ({counted} UNION ALL {fresh}) GROUP BY sid, node"


def session_totals(conn: Connection) -> dict[int, dict[str, int]]:
    """session id -> node -> CPU samples, for every session with samples: its counted
    totals plus its samples past its watermark, in one statement (one snapshot, so a
    compaction committing meanwhile is seen whole or not at all)."""
    out: dict[int, dict[str, int]] = {}
    for sid, node, n in conn.execute(text(_totals_sql(conn))):
        out.setdefault(int(sid), {})[node] = int(n or 0)
    return out
