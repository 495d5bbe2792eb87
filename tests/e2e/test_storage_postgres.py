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
