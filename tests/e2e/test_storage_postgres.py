"""The same models and migrations on a real PostgreSQL: COPY writes and concurrent interning."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select

from kubeprof.model import Batch, CpuSample, Frame, FrameKind, GpuActivity
from kubeprof.storage import Store
from kubeprof.storage import queries as q
from kubeprof.storage.models import StackRow

pytestmark = pytest.mark.e2e


def test_postgres_store_round_trip_and_shared_interning(postgres_dsn):
    store = Store.open(postgres_dsn.url)
    sid = store.create_session("pg-roundtrip", command="python train.py", hz=99)
    stacks = [
        (Frame("main", FrameKind.PYTHON, "/t.py", 1), Frame(f"f{i}", FrameKind.PYTHON, "/t.py", i))
        for i in range(50)
    ]

    def writer(offset: int) -> None:
        s = Store.open(postgres_dsn.url)  # separate interning cache, as separate agents have
        try:
            for round_ in range(5):
                samples = tuple(
                    CpuSample(offset + round_ * 1000 + i, 7, 7, "w", 0, st)
                    for i, st in enumerate(stacks)
                )
                s.write_batch(sid, Batch(samples=samples), node=f"node-{offset}")
        finally:
            s.close()

    threads = [threading.Thread(target=writer, args=(n * 10**6,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kernel = GpuActivity(
        kind="kernel",
        name="_Z3addPf",
        start_ns=5,
        end_ns=9,
        device=0,
        pid=7,
        correlation_id=1,
        stack=stacks[0],
        launch_ns=3,  # its launch's call, 2 ns before it ran, and the thread that made it
        launch_tid=8,
    )
    store.write_batch(sid, Batch(gpu_activities=(kernel,)))
    with store.engine.connect() as conn:
        info = q.find_session(conn, "pg-roundtrip")
        profile = q.load_profile(conn, info)
        n_stacks = conn.scalar(select(func.count()).select_from(StackRow))
        acts = q.gpu_activities(conn, sid)
    store.close()
    assert info.samples == 3 * 5 * 50
    assert sum(ws.samples for ws in profile.cpu) == 750
    assert n_stacks >= 50 and len({ws.stack for ws in profile.cpu}) == 50
    assert acts == [kernel]


def test_postgres_sample_columns_match_a_row_by_row_read(postgres_dsn, tmp_path):
    """The server-built per-thread arrays (read from their binary form, the samples of a
    report's load beside its GPU records) give the columns SQLite's row-by-row read gives:
    out-of-order timestamps sorted, a renamed thread under its earliest name, timestamps
    beyond 2**32, stack indexes in first-appearance order."""
    stacks = [
        (Frame("main", FrameKind.PYTHON, "/t.py", 1), Frame(f"g{i}", FrameKind.PYTHON, "/t.py", i))
        for i in range(7)
    ]
    big = 2**61
    rows = [
        CpuSample(big + ts, 7, tid, name, 0, stacks[(ts * 3 + tid) % 7])
        for tid, name in ((7, "main"), (8, "loader"))
        for ts in (50, 10, 40, 20, 30, 10**12, 5)
    ]
    rows.append(CpuSample(big + 1, 7, 8, "loader-renamed", 0, stacks[6]))
    rows.append(CpuSample(big + 60, 7, 8, "loader-renamed", 0, stacks[1]))
    columns = {}
    for label, url in (("pg", postgres_dsn.url), ("sqlite", f"sqlite:///{tmp_path / 's.db'}")):
        store = Store.open(url)
        sid = store.create_session(f"columns-{label}", hz=99)
        store.write_batch(sid, Batch(samples=tuple(rows[:9])))
        store.write_batch(sid, Batch(samples=tuple(rows[9:])))
        with store.engine.connect() as conn:
            cpu = q.sample_columns(conn, q.find_session(conn, f"columns-{label}"))
        store.close()
        assert cpu is not None
        columns[label] = (
            [(t.pid, t.tid, t.thread, list(t.ts_ns), list(t.stack_ids)) for t in cpu.threads],
            cpu.stacks,
        )
    assert columns["pg"] == columns["sqlite"]
    threads, _ = columns["pg"]
    assert [t[2] for t in threads] == ["main", "loader-renamed"]
    assert threads[1][3] == sorted(threads[1][3]) and threads[1][3][0] == big + 1
