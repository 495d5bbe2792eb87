"""Bulk reads: a session's CPU samples and GPU records, loaded in as few Python steps as
the database allows.

A big session (10 M samples, 1 M kernels) is read whole by every report. Through
SQLAlchemy's rows each sample or kernel costs microseconds of Python; here, on PostgreSQL,
the rows come as plain tuples from the driver (binary format), and the samples of each
thread as two arrays built by the server (``array_agg``), so no sample ever becomes a row
object. SQLite reads the same statements row by row.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.engine import Connection

from kubeprof.analysis.cpu_samples import ThreadSamples
from kubeprof.storage.models import SampleRow


def _psycopg(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg"


def driver_rows(conn: Connection, stmt: Select[Any]) -> list[tuple[Any, ...]]:
    """The rows of ``stmt`` as plain tuples: on PostgreSQL straight from psycopg's binary
    cursor (no SQLAlchemy Row per row, a third of the time at a million rows), in the
    connection's own transaction. The statement is our own; its values stay parameters."""
    if not _psycopg(conn):
        return [tuple(r) for r in conn.execute(stmt)]
    compiled = stmt.compile(dialect=conn.dialect)
    raw = conn.connection.driver_connection
    assert raw is not None, "a live psycopg connection is needed"
    with raw.cursor(binary=True) as cur:
        cur.execute(str(compiled), compiled.params)
        return cur.fetchall()


def thread_columns(conn: Connection, session_id: int) -> tuple[list[ThreadSamples], dict[int, int]]:
    """Each thread's samples, in (pid, tid) order, as time-sorted ``array('q')`` columns of
    timestamps and dense stack indexes; and stack id -> index, numbered in order of first
    appearance (threads in order, each in time order), as a row-by-row read numbers them.

    A thread's name is the one of its earliest sample. Samples of one thread with the same
    timestamp keep the table's order (a sampler never takes two of one thread at once)."""
    groups: dict[tuple[int, int], list[tuple[str, list[int], list[int]]]] = {}
    for pid, tid, thread, ts, ids in _sample_groups(conn, session_id):
        groups.setdefault((pid, tid), []).append((thread, ts, ids))
    threads: list[ThreadSamples] = []
    index: dict[int, int] = {}
    for (pid, tid), parts in sorted(groups.items()):
        name = min(parts, key=lambda p: min(p[1]))[0]
        ts = [x for p in parts for x in p[1]] if len(parts) > 1 else parts[0][1]
        ids = [x for p in parts for x in p[2]] if len(parts) > 1 else parts[0][2]
        ts, ids = _time_sorted(ts, ids)
        for sid in dict.fromkeys(ids):  # first appearance, at C speed
            index.setdefault(sid, len(index))
        threads.append(
            ThreadSamples(pid, tid, name, array("q", ts), array("q", map(index.__getitem__, ids)))
        )
    return threads, index


def _sample_groups(
    conn: Connection, session_id: int
) -> Iterable[tuple[int, int, str, list[int], list[int]]]:
    """(pid, tid, thread name, timestamps, stack ids) per thread and name, unsorted."""
    t = SampleRow.__table__
    if _psycopg(conn):
        q = (
            select(
                t.c.pid,
                t.c.tid,
                t.c.thread,
                func.array_agg(t.c.ts_ns),
                func.array_agg(t.c.stack_id),
            )
            .where(t.c.session_id == session_id)
            .group_by(t.c.pid, t.c.tid, t.c.thread)
        )
        return driver_rows(conn, q)
    out: dict[tuple[int, int, str], tuple[list[int], list[int]]] = {}
    q2 = select(t.c.pid, t.c.tid, t.c.thread, t.c.ts_ns, t.c.stack_id).where(
        t.c.session_id == session_id
    )
    for pid, tid, thread, ts_ns, stack_id in conn.execute(q2.order_by(t.c.id)):
        ts, ids = out.setdefault((pid, tid, thread), ([], []))
        ts.append(ts_ns)
        ids.append(stack_id)
    return [(p, t_, th, ts, ids) for (p, t_, th), (ts, ids) in out.items()]


def _time_sorted(ts: list[int], ids: list[int]) -> tuple[list[int], list[int]]:
    """The two parallel lists in timestamp order (stable). Samples are stored about in
    time order, so the check (a sort of a sorted list is one linear pass) is the usual
    cost."""
    if ts == sorted(ts):
        return ts, ids
    order = sorted(range(len(ts)), key=ts.__getitem__)
    return [ts[i] for i in order], [ids[i] for i in order]
