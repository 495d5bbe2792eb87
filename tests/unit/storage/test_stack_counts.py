"""Pre-counted stacks: the flame graph's numbers equal a count over the sample rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import delete, func, select, text

from kubeprof.model import Batch, CpuSample, Frame, FrameKind
from kubeprof.storage import Store, compaction, migrate
from kubeprof.storage import queries as q
from kubeprof.storage.models import SessionRow, StackCountRow
from kubeprof.storage.stack_counts import BUCKET_NS, bucket_of

MAIN = Frame("main", FrameKind.PYTHON, "/app/train.py", 10)
HOT = Frame("hot", FrameKind.PYTHON, "/app/train.py", 20)
COLD = Frame("cold", FrameKind.PYTHON, "/app/train.py", 30)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(f"sqlite:///{tmp_path}/kp.db")
    yield s
    s.close()


def _batch(start_s: float, n: int, stack, *, pid=100, tid=101) -> Batch:
    t0 = int(start_s * 1e9)
    return Batch(
        samples=tuple(
            CpuSample(t0 + i * 10_000_000, pid, tid, "worker", 0, stack) for i in range(n)
        )
    )


def _by(stacks) -> dict[tuple, int]:
    out: dict[tuple, int] = {}
    for ws in stacks:
        key = (ws.stack, ws.pid, ws.tid, ws.thread)
        out[key] = out.get(key, 0) + ws.samples
    return out


def test_counts_match_the_sample_rows_across_batches(store):
    sid = store.create_session("s", hz=100)
    # The same (thread, stack) in several batches adds up; two threads stay apart.
    store.write_batch(sid, _batch(1, 30, (MAIN, HOT)))
    store.write_batch(
        sid,
        Batch(
            samples=_batch(2, 20, (MAIN, HOT)).samples + _batch(2, 5, (MAIN, COLD), tid=102).samples
        ),
    )
    with store.engine.connect() as conn:
        info = q.find_session(conn, "s")
        fast, slow = q.cpu_stacks(conn, info), q.cpu_stacks_from_samples(conn, info)
    assert _by(fast) == _by(slow)
    assert _by(fast)[((MAIN, HOT), 100, 101, "worker")] == 50


def test_time_range_reads_only_its_buckets(store):
    sid = store.create_session("s", hz=100)
    b = BUCKET_NS / 1e9
    store.write_batch(sid, _batch(0.5 * b, 40, (MAIN, HOT)))  # bucket 0
    store.write_batch(sid, _batch(1.5 * b, 7, (MAIN, COLD)))  # bucket 1
    with store.engine.connect() as conn:
        info = q.find_session(conn, "s")
        first = _by(q.cpu_stacks(conn, info, buckets=(0, 0)))
        second = _by(q.cpu_stacks(conn, info, buckets=(1, 1)))
        only_pid = q.cpu_stacks(conn, info, pids=[("", 999)])
    assert first == {((MAIN, HOT), 100, 101, "worker"): 40}
    assert second == {((MAIN, COLD), 100, 101, "worker"): 7}
    assert only_pid == ()


def test_deleting_a_session_deletes_its_counts(store):
    sid = store.create_session("s", hz=100)
    store.write_batch(sid, _batch(1, 10, (MAIN, HOT)))
    assert compaction.compact(store.engine, sid) == 10
    with store.engine.begin() as conn:
        assert conn.scalar(select(func.count()).select_from(StackCountRow)) == 2
        conn.execute(delete(SessionRow).where(SessionRow.id == sid))
        assert conn.scalar(select(func.count()).select_from(StackCountRow)) == 0


def test_upgrade_counts_sessions_stored_before_the_migration(tmp_path):
    url = f"sqlite:///{tmp_path}/old.db"
    store = Store.open(url)
    sid = store.create_session("old", hz=100)
    store.write_batch(sid, _batch(1, 12, (MAIN, HOT)))
    with store.engine.begin() as conn:
        migrate.downgrade(conn, "0002")  # the schema before stack_counts, samples kept
        assert conn.scalar(text("SELECT COUNT(*) FROM samples")) == 12
        migrate.upgrade(conn)
        info = q.find_session(conn, "old")
        assert _by(q.cpu_stacks(conn, info)) == _by(q.cpu_stacks_from_samples(conn, info))
        one = bucket_of(10**9)  # the samples' second, counted by the migration's SQL
        assert _by(q.cpu_stacks(conn, info, buckets=(one, one))) == {
            ((MAIN, HOT), 100, 101, "worker"): 12
        }
        assert _by(q.cpu_stacks(conn, info, buckets=(one + 1, one + 5))) == {}
    store.close()
