"""A batch's transaction on a real PostgreSQL with its small statements pipelined
(`kubeprof.storage.batch_tx`): still stored once per batch id, nothing of a refused or
failed batch stored, upserts as before, and few round trips to the server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import event, func, select, text
from sqlalchemy.exc import IntegrityError, OperationalError

from kubeprof.model import Batch, CpuSample, Frame, FrameKind, ProcessInfo
from kubeprof.operator.db import BatchWriter
from kubeprof.storage import Store
from kubeprof.storage.bulk import copy_tuples
from kubeprof.storage.cpu_samples import COLUMNS
from kubeprof.storage.models import CounterRow, IngestedBatchRow, ProcessRow, SampleRow

pytestmark = pytest.mark.e2e

STACKS = [
    (Frame("main", FrameKind.PYTHON, "/t.py", 1), Frame(f"f{i}", FrameKind.PYTHON, "/t.py", i))
    for i in range(20)
]


@pytest.fixture
def store(postgres_dsn) -> Iterator[Store]:
    with closing(Store.open(postgres_dsn.url)) as s:  # sessions named per test
        yield s


def _batch(t0: int, cmdline: str = "python train.py", counters=None) -> Batch:
    return Batch(
        samples=tuple(CpuSample(t0 + i, 7, 7, "w", 0, STACKS[i % 20]) for i in range(100)),
        processes=(ProcessInfo(7, 1, "python", cmdline, "c" * 64, "pod-1"),),
        counters=counters or {},
    )


def _counts(store: Store, sid: int) -> tuple[int, int, int, list[tuple[str, int]]]:
    with store.engine.connect() as conn:
        n = [
            conn.scalar(select(func.count()).select_from(t).where(t.session_id == sid))
            for t in (SampleRow, IngestedBatchRow, ProcessRow)
        ]
        counters = conn.execute(
            select(CounterRow.name, CounterRow.value).where(CounterRow.session_id == sid)
        ).all()
    return n[0], n[1], n[2], [tuple(r) for r in counters]


def test_a_retried_batch_is_stored_once_and_upserts_take_the_newest(store):
    sid = store.create_session("once", hz=99)
    w = BatchWriter(store.engine, compact_every_s=1e6)
    first = w.store(sid, "b1", "node-0", _batch(0, counters={"lost": 2}))
    again = w.store(sid, "b1", "node-0", _batch(0, counters={"lost": 2}))
    assert (first.duplicate, first.rows) == (False, 101)
    assert (again.duplicate, again.rows) == (True, 101)
    assert _counts(store, sid) == (100, 1, 1, [("lost", 2)])
    w.store(sid, "b2", "node-0", _batch(1000, "python train.py --resume", {"lost": 3}))
    assert _counts(store, sid) == (200, 2, 1, [("lost", 5)])
    with store.engine.connect() as conn:
        assert conn.scalar(select(ProcessRow.cmdline).where(ProcessRow.session_id == sid)) == (
            "python train.py --resume"
        )
        stored = conn.execute(
            select(IngestedBatchRow.batch_id, IngestedBatchRow.rows, IngestedBatchRow.stacks)
            .where(IngestedBatchRow.session_id == sid)
            .order_by(IngestedBatchRow.batch_id)
        ).all()
    assert [tuple(r) for r in stored] == [("b1", 101, 20), ("b2", 101, 0)]


class Refused(Exception):
    pass


def _refuse(*_args) -> None:
    raise Refused


def test_a_batch_refused_before_its_commit_leaves_nothing_and_can_be_sent_again(store):
    sid = store.create_session("refused", hz=99)
    w = BatchWriter(store.engine, compact_every_s=1e6)
    with pytest.raises(Refused):  # a quota, told what the batch interned
        w.store(sid, "b1", "node-0", _batch(0, counters={"lost": 1}), interned=_refuse)

    class Sealed:
        def __enter__(self) -> None:
            raise Refused

        def __exit__(self, *_exc: object) -> None:
            return None

    with pytest.raises(Refused):  # the session sealed while it was being written
        w.store(sid, "b1", "node-0", _batch(0, counters={"lost": 1}), committing=Sealed)
    assert _counts(store, sid) == (0, 0, 0, [])
    assert not w.store(sid, "b1", "node-0", _batch(0, counters={"lost": 1})).duplicate
    assert _counts(store, sid) == (100, 1, 1, [("lost", 1)])


def test_a_database_refusal_is_sqlalchemys_error_and_stores_nothing(store):
    """The ingest answers 422 for an IntegrityError and 503 (retry) for other database
    errors: psycopg's own errors from a pipeline must arrive as SQLAlchemy's."""
    w = BatchWriter(store.engine, compact_every_s=1e6)
    with pytest.raises(IntegrityError):
        w.store(2_000_000_000, "b1", "node-0", _batch(0))  # no such session
    sid = store.create_session("after", hz=99)
    assert not w.store(sid, "b1", "node-0", _batch(0)).duplicate  # the writer still works


def test_a_server_lost_mid_copy_is_sqlalchemys_error_and_the_connection_dropped(store):
    """A COPY (like a pipeline) goes past SQLAlchemy: psycopg's error for a lost server
    arrives as SQLAlchemy's OperationalError, as for its own statements (the ingest
    answers 503 and the agent sends the batch again), and the connection is invalidated:
    closing it raises nothing more and the writer's next batch gets a live one."""
    sid = store.create_session("lost", hz=99)
    with store.engine.connect() as conn, store.engine.connect() as other:
        pid = conn.scalar(text("SELECT pg_backend_pid()"))
        other.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        with pytest.raises(OperationalError) as lost:
            copy_tuples(conn, SampleRow.__tablename__, COLUMNS, [(sid, "n", 1, 7, 7, 0, "w", 1)])
        assert lost.value.connection_invalidated and conn.invalidated
    w = BatchWriter(store.engine, compact_every_s=1e6)
    assert not w.store(sid, "b1", "node-0", _batch(0)).duplicate
    assert _counts(store, sid)[0] == 100


def _ready_for_query(store: Store, tmp_path: Path, write) -> int:
    """Round trips the server ended with ReadyForQuery (one per statement sent alone, one
    per pipeline) while `write()` ran, from libpq's protocol trace."""
    trace = tmp_path / "trace"

    def on(dbapi_conn: psycopg.Connection, *_a: object) -> None:
        dbapi_conn.pgconn.trace(out.fileno())

    def off(dbapi_conn: psycopg.Connection, *_a: object) -> None:
        dbapi_conn.pgconn.untrace()

    with trace.open("w") as out:
        event.listen(store.engine, "checkout", on)
        event.listen(store.engine, "checkin", off)
        try:
            write()
        finally:
            event.remove(store.engine, "checkout", on)
            event.remove(store.engine, "checkin", off)
    return sum("\tReadyForQuery\t" in line for line in trace.read_text().splitlines())


def test_a_steady_batch_takes_four_round_trips_to_the_server(store, tmp_path):
    """BEGIN (psycopg syncs after it), the id row with the locks, the COPY, the upserts and
    counts with the COMMIT: not one round trip per statement (ten before), each of which
    the ingest's threads also waited to get the GIL back after."""
    sid = store.create_session("trips", hz=99)
    w = BatchWriter(store.engine, compact_every_s=1e6)
    w.store(sid, "warm", "node-0", _batch(0))  # its stacks interned: later batches look none up
    n = _ready_for_query(store, tmp_path, lambda: w.store(sid, "b1", "node-0", _batch(1000)))
    assert n == 4
    # kubeprof record's writes (Store.write_batch, no id row) likewise
    store.write_batch(sid, _batch(2000))  # its own interner's cache filled
    n = _ready_for_query(store, tmp_path, lambda: store.write_batch(sid, _batch(3000)))
    assert n == 4
    assert _counts(store, sid)[0] == 400
