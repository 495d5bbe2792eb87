"""Counting later: `stack_counts` as a rollup of the samples past a per-session watermark.

A batch's transaction writes only its sample rows; counting them there (about two count
rows per sample, upserted) cost as much again as the samples. Here the samples with ids
past ``sessions.counted_sample_id`` are added to `stack_counts` and the watermark raised
in one transaction, so a crash between the two rolls both back and nothing is counted
twice. The session row's lock (an UPDATE of it first) lets one compaction of a session
run at a time, across threads, processes and operator replicas. Chunks go in id order,
so a count row's thread is the name of its newest sample.

Sample ids are allocated as rows are inserted, not as they commit: on PostgreSQL a batch
holding ids below a committed one's may commit later. So the highest id is taken behind a
barrier (`hold_writing`: each batch holds a per-session advisory lock shared while it
writes samples; `_settled_high` takes it exclusively for two short statements), below
which no batch of the session is in flight. SQLite has one writer at a time: the highest
committed id is settled.

Readers (`stack_counts.stack_counts`, `stack_counts.session_totals`) add the samples past
the watermark themselves, so they answer the same whether compaction ran or not. They find
them per session through samples' (session_id, id) index: a session left uncounted (a
killed recording) or created empty costs its own rows, not every sample stored after it.
A finished session is counted by its finisher; `settle` counts a killed one's when a
reader first touches it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from sqlalchemy import func, select, text, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.sql.elements import TextClause

from kubeprof.storage.models import SampleRow, SessionRow, StackCountRow
from kubeprof.storage.stack_counts import BUCKET_NS, TOTAL_BUCKET

log = logging.getLogger(__name__)
_PG_LOCK_CLASS = 0x6B70  # first int4 key of the per-session sample writers' lock ("kp")
CHUNK = 500_000  # samples counted per transaction at most


_WRITING = text("SELECT pg_advisory_xact_lock_shared(:c, :s)")


def writing_statements(
    conn: Connection, session_id: int
) -> list[tuple[TextClause, dict[str, int]]]:
    """What `hold_writing` runs, to send with other statements (`batch_tx`)."""
    if conn.dialect.name == "postgresql":
        return [(_WRITING, {"c": _PG_LOCK_CLASS, "s": session_id})]
    return []


def hold_writing(conn: Connection, session_id: int) -> None:
    """PostgreSQL: hold the session's sample-writers lock shared until `conn`'s transaction
    ends; take it before inserting sample rows (a compaction waits for them to commit)."""
    for stmt, params in writing_statements(conn, session_id):
        conn.execute(stmt, params)


def _high(conn: Connection, session_id: int, after: int, limit: int) -> int | None:
    """The id of the `limit`-th sample of the session past `after`, or its highest."""
    ids = (
        select(SampleRow.id)
        .where(SampleRow.session_id == session_id, SampleRow.id > after)
        .order_by(SampleRow.id)
    )
    nth = conn.scalar(ids.offset(limit - 1).limit(1))
    if nth is not None:
        return int(nth)
    top = conn.scalar(
        select(func.max(SampleRow.id)).where(
            SampleRow.session_id == session_id, SampleRow.id > after
        )
    )
    return None if top is None else int(top)


def _settled_high(engine: Engine, session_id: int, limit: int) -> int | None:
    """PostgreSQL: the highest sample id to count up to, with no batch of the session in
    flight below it (the barrier); None when there is nothing to count."""
    with engine.begin() as conn:
        conn.execute(
            text("SELECT pg_advisory_xact_lock(:c, :s)"), {"c": _PG_LOCK_CLASS, "s": session_id}
        )
        mark = conn.scalar(select(SessionRow.counted_sample_id).where(SessionRow.id == session_id))
        return None if mark is None else _high(conn, session_id, int(mark), limit)


def _count_sql(conn: Connection) -> str:
    """Adds the samples of :s with ids in (:lo, :hi] to stack_counts (total and bucket
    rows); a row's thread is the name of its newest sample, as a batch's last name was."""
    t = StackCountRow.__tablename__
    cols = "session_id, bucket, node, pid, tid, stack_id, thread, samples"
    key = "session_id, bucket, node, pid, tid, stack_id"
    rows = f"FROM {SampleRow.__tablename__} WHERE session_id = :s AND id > :lo AND id <= :hi"
    if conn.dialect.name == "postgresql":
        counted = (
            f"SELECT :s, COALESCE(b, {TOTAL_BUCKET}), node, pid, tid, stack_id, "
            "(array_agg(thread ORDER BY id DESC))[1], count(*) FROM (SELECT "
            f"ts_ns / {BUCKET_NS} AS b, node, pid, tid, stack_id, thread, id {rows}) x "
            "GROUP BY GROUPING SETS ((b, node, pid, tid, stack_id), (node, pid, tid, stack_id))"
        )
    else:  # SQLite: a bare column next to max() comes from the row with the maximum
        counted = (
            "SELECT s, b, node, pid, tid, stack_id, thread, n FROM (SELECT :s AS s, b, node, "
            "pid, tid, stack_id, thread, count(*) AS n, max(id) FROM ("
            f"SELECT ts_ns / {BUCKET_NS} AS b, node, pid, tid, stack_id, thread, id {rows} "
            f"UNION ALL SELECT {TOTAL_BUCKET}, node, pid, tid, stack_id, thread, id {rows}) "
            "GROUP BY b, node, pid, tid, stack_id) WHERE true"
        )
    return (
        f"INSERT INTO {t} ({cols}) {counted} ON CONFLICT ({key}) DO UPDATE SET "
        f"samples = {t}.samples + excluded.samples, thread = excluded.thread"
    )


def count_range(conn: Connection, session_id: int, after: int, upto: int) -> None:
    """Add the session's samples with ids in (after, upto] and raise its watermark to
    `upto`, on `conn`'s transaction (which must hold the session row: `_lock_mark`)."""
    conn.execute(text(_count_sql(conn)), {"s": session_id, "lo": after, "hi": upto})
    conn.execute(
        update(SessionRow).where(SessionRow.id == session_id).values(counted_sample_id=upto)
    )


def _lock_mark(conn: Connection, session_id: int) -> int | None:
    """Lock the session row until the transaction ends; its watermark (None: no session)."""
    mark = conn.scalar(
        update(SessionRow)
        .where(SessionRow.id == session_id)
        .values(counted_sample_id=SessionRow.counted_sample_id)
        .returning(SessionRow.counted_sample_id)
    )
    return None if mark is None else int(mark)


def compact(
    engine: Engine,
    session_id: int,
    *,
    chunk: int = CHUNK,
    chunks: int | None = None,
    between: Callable[[Connection], None] | None = None,
) -> int:
    """Count the session's samples past its watermark, `chunk` samples per transaction
    (at most `chunks` transactions); the number counted. `between(conn)` runs after a
    chunk's counts are added and before its transaction commits (tests kill it there)."""
    done = 0
    while chunks is None or chunks > 0:
        pg = engine.dialect.name == "postgresql"
        high = _settled_high(engine, session_id, chunk) if pg else None
        if pg and high is None:
            return done
        with engine.begin() as conn:
            mark = _lock_mark(conn, session_id)
            if mark is None:
                return done
            if not pg:
                high = _high(conn, session_id, mark, chunk)
            if high is None or high <= mark:  # another compaction counted it meanwhile
                return done
            n = int(
                conn.scalar(
                    select(func.count()).where(
                        SampleRow.session_id == session_id,
                        SampleRow.id > mark,
                        SampleRow.id <= high,
                    )
                )
                or 0
            )
            count_range(conn, session_id, mark, high)
            if between is not None:
                between(conn)
        done += n
        chunks = None if chunks is None else chunks - 1
    return done


def count_all(conn: Connection) -> None:
    """Count every session's samples past its watermark on `conn`'s transaction (a
    migration holding the database: no batch is in flight)."""
    for sid in conn.scalars(select(SessionRow.id).order_by(SessionRow.id)).all():
        mark = _lock_mark(conn, sid)
        top = conn.scalar(select(func.max(SampleRow.id)).where(SampleRow.session_id == sid))
        if mark is not None and top is not None and top > mark:
            count_range(conn, sid, mark, int(top))


def uncounted(conn: Connection, session_ids: Collection[int] | None = None) -> list[int]:
    """Sessions (of `session_ids`, default all) with samples past their watermark: a
    writer that died before counting (a killed `kubeprof record`, an operator gone
    mid-session) leaves them, and every reader adds them until something counts them.
    One probe of (session_id, id) per session: a session costs its own rows only."""
    x, s = SessionRow, SampleRow
    fresh = select(s.id).where(s.session_id == x.id, s.id > x.counted_sample_id).exists()
    q = select(x.id).where(fresh).order_by(x.id)
    if session_ids is not None:
        q = q.where(x.id.in_(sorted(session_ids)))
    return [int(i) for i in conn.scalars(q)]


def settle(engine: Engine, session_ids: Collection[int] | None = None) -> int:
    """Count the samples readers would otherwise add at every read (a killed recording's),
    once, when a reader first touches their session; how many. Safe beside live writers
    (`compact`'s barrier); a store busy or read-only leaves them to be added by readers."""
    with engine.connect() as conn:
        todo = uncounted(conn, session_ids)
    done = 0
    for sid in todo:
        try:
            done += compact(engine, sid)
        except (OperationalError, ProgrammingError) as exc:  # busy, read-only, no privilege
            log.info("counting session %s's samples left for later: %s", sid, exc)
            break
    return done
