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
