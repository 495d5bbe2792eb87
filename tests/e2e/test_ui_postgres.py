"""Pre-counted stacks and the web UI's API on a real PostgreSQL: concurrent writers add to
the same (thread, stack) rows and the flame graph still equals a count of the samples."""

from __future__ import annotations

import json
import threading

import pytest

from kubeprof.model import Batch, CpuSample, Frame, FrameKind
from kubeprof.storage import Store
from kubeprof.storage import queries as q
from kubeprof.ui.routes import Routes

pytestmark = pytest.mark.e2e


def test_concurrent_batches_add_up_and_the_api_reads_them(postgres_dsn):
    store = Store.open(postgres_dsn.url)
    sid = store.create_session("pg-stack-counts", hz=99)
    stacks = [
        (Frame("main", FrameKind.PYTHON, "/t.py", 1), Frame(f"f{i}", FrameKind.PYTHON, "/t.py", i))
        for i in range(20)
    ]

    def writer(n: int) -> None:
        s = Store.open(postgres_dsn.url)  # its own connection and interning cache
        try:
            for round_ in range(10):  # every writer adds to the very same rows
                samples = tuple(
                    CpuSample(10**9 * round_ + i, 7, 7, "w", 0, st) for i, st in enumerate(stacks)
                )
                s.write_batch(sid, Batch(samples=samples))
        finally:
            s.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with store.engine.connect() as conn:
        info = q.find_session(conn, "pg-stack-counts")
        fast = {ws.stack: ws.samples for ws in q.cpu_stacks(conn, info)}
        slow = {ws.stack: ws.samples for ws in q.cpu_stacks_from_samples(conn, info)}
    assert fast == slow and set(fast.values()) == {40}
    resp = Routes(store.engine).handle(
        "GET", "/api/v1/sessions/local/pg-stack-counts/flamegraph", {"view": "cpu"}
    )
    store.close()
    assert resp.status == 200
    assert json.loads(resp.body)["views"]["cpu"]["samples"][0] == 4 * 10 * 20


def _count_rows(store: Store, name: str) -> list[tuple]:
    """Every stack_counts row of a session, stacks spelled out (ids differ per database)."""
    from kubeprof.storage.intern import load_stacks
    from kubeprof.storage.stack_counts import stack_counts

    with store.engine.connect() as conn:
        info = q.find_session(conn, name)
        out = []
        for buckets in (None, *((b, b) for b in range(4))):
            rows = stack_counts(conn, info.id, buckets=buckets)
            stacks = load_stacks(conn, [r[4] for r in rows])
            out += [(buckets, n, p, t, th, stacks[s], c) for n, p, t, th, s, c in rows]
    return sorted(out, key=repr)


def test_server_counted_rows_equal_the_python_counted_ones(postgres_dsn, tmp_path):
    """PostgreSQL counts a batch's samples in SQL, SQLite in Python: the same rows come out,
    per time bucket and for the session, and a thread renamed within a batch is counted
    under the name it had last in the batch (on both, as the flame graph shows it)."""
    main = Frame("main", FrameKind.PYTHON, "/t.py", 1)
    stacks = [(main, Frame(f"f{i}", FrameKind.PYTHON, "/t.py", i)) for i in range(5)]
    batches = [
        Batch(
            samples=tuple(
                CpuSample(
                    round_ * 10**9 + i * 37_000_000,  # 37 ms apart: ~2 buckets a batch
                    7 + i % 2,
                    70 + i % 3,
                    "loader" if round_ == 1 and i > 30 and i % 3 == 0 else f"w{i % 3}",
                    i % 4,
                    stacks[(i * 7 + round_) % 5],
                )
                for i in range(50)
            )
        )
        for round_ in range(3)
    ]
    counted = []
    for url in (postgres_dsn.url, f"sqlite:///{tmp_path}/kp.db"):
        store = Store.open(url)
        try:
            sid = store.create_session("pg-vs-sqlite-counts", hz=99)
            for i, b in enumerate(batches):
                store.write_batch(sid, b, node=f"node-{i % 2}")
            counted.append(_count_rows(store, "pg-vs-sqlite-counts"))
        finally:
            store.close()
    pg, lite = counted
    assert pg == lite
    assert sum(r[-1] for r in pg if r[0] is None) == 150
    assert any(r[4] == "loader" for r in pg)


def test_deleting_a_session_deletes_its_counts_and_frees_its_stacks(postgres_dsn):
    """stack_counts has no foreign keys (a trigger follows sessions): deleting a session still
    takes its counts, and the shared-rows GC still sees a stack the counts refer to."""
    from sqlalchemy import func, select

    from kubeprof.storage import compaction, sessions, shared_gc
    from kubeprof.storage.models import StackCountRow, StackRow

    store = Store.open(postgres_dsn.url)
    only = (Frame("gone", FrameKind.PYTHON, "/gone.py", 1), Frame("g", FrameKind.NATIVE, "x"))
    try:
        sid = store.create_session("pg-counts-follow", hz=99)
        keep = store.create_session("pg-counts-stay", hz=99)
        for s in (sid, keep):
            store.write_batch(s, Batch(samples=(CpuSample(10**9, 7, 7, "w", 0, only),)))
            assert compaction.compact(store.engine, s) == 1  # counted: stack_counts rows
        rows = select(func.count()).select_from(StackCountRow)
        with store.engine.begin() as conn:
            # The counts alone keep the stack: the GC must not take it.
            conn.exec_driver_sql(f"DELETE FROM samples WHERE session_id = {keep}")
            assert sessions.remove(conn, [sid]) == 1
            assert conn.scalar(rows.where(StackCountRow.session_id == sid)) == 0
            assert conn.scalar(rows.where(StackCountRow.session_id == keep)) == 2
        shared_gc.collect(store.engine)
        with store.engine.connect() as conn:
            info = q.find_session(conn, "pg-counts-stay")
            assert [ws.stack for ws in q.cpu_stacks(conn, info)] == [only]
            assert conn.scalar(select(func.count()).select_from(StackRow)) > 0
    finally:
        store.close()
