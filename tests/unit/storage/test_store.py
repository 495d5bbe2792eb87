"""Storage round trip, interning and counters on the embedded SQLite store."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from kubeprof.model import (
    Batch,
    CpuSample,
    Frame,
    FrameKind,
    GpuActivity,
    GpuMetricSample,
    ProcessInfo,
)
from kubeprof.storage import Store, StoreError
from kubeprof.storage import queries as q
from kubeprof.storage.models import FrameRow, SampleRow, StackRow

MAIN = Frame("main", FrameKind.PYTHON, "/app/train.py", 10)
HOT = Frame("hot", FrameKind.PYTHON, "/app/train.py", 20)
COLD = Frame("cold", FrameKind.PYTHON, "/app/train.py", 30)
MEMCPY = Frame("__memcpy_avx_unaligned", FrameKind.NATIVE, "/usr/lib/libc.so.6")
SYSCALL = Frame("do_syscall_64", FrameKind.KERNEL)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(f"sqlite:///{tmp_path}/kp.db")
    yield s
    s.close()


def _samples(stack, n, *, pid=100, tid=101, start=0):
    return tuple(CpuSample(start + i, pid, tid, "worker", i % 2, stack) for i in range(n))


def test_samples_round_trip_with_process_names(store):
    sid = store.create_session("s1", command="python train.py", hz=100)
    batch = Batch(
        samples=_samples((MAIN, HOT, MEMCPY, SYSCALL), 8) + _samples((MAIN, COLD), 2),
        processes=(ProcessInfo(100, 1, "python3", "python3 train.py"),),
    )
    assert store.write_batch(sid, batch) == 11
    store.finish_session(sid, end_ns=2_000_000_000)
    with store.engine.connect() as conn:
        info = q.find_session(conn, "s1")
        profile = q.load_profile(conn, info)
    by_leaf = {ws.stack[-1].name: ws for ws in profile.cpu}
    assert by_leaf["do_syscall_64"].samples == 8
    assert by_leaf["do_syscall_64"].stack == (MAIN, HOT, MEMCPY, SYSCALL)
    assert by_leaf["cold"].samples == 2
    assert by_leaf["cold"].value_ns == 2 * 10_000_000  # 100 Hz -> 10 ms a sample
    assert {ws.process for ws in profile.cpu} == {"python3"}
    assert info.status == "completed" and info.samples == 10


def test_identical_stacks_and_frames_are_stored_once(store):
    sid = store.create_session("s2")
    stack = (MAIN, HOT, MEMCPY)
    store.write_batch(sid, Batch(samples=_samples(stack, 50)))
    store.write_batch(sid, Batch(samples=_samples(stack, 50, start=100)))
    other = Store.open(str(store.engine.url))  # a second writer with a cold cache
    sid2 = other.create_session("s3")
    other.write_batch(sid2, Batch(samples=_samples((MAIN, COLD), 5)))
    other.close()
    with store.engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(StackRow)) == 2
        assert conn.scalar(select(func.count()).select_from(FrameRow)) == 4
        assert conn.scalar(select(func.count()).select_from(SampleRow)) == 105


def test_gpu_records_and_counters_round_trip(store):
    sid = store.create_session("gpu")
    launch = (MAIN, Frame("cudaLaunchKernel", FrameKind.CUDA_API))
    act = GpuActivity(
        kind="kernel",
        name="_Z6kernelPf",
        demangled="kernel(float*)",
        start_ns=10,
        end_ns=30,
        device=0,
        pid=100,
        correlation_id=7,
        grid=(4, 1, 1),
        block=(256, 1, 1),
        registers=32,
        stack=launch,
        launch_ns=8,  # called 2 ns before it ran, by thread 101
        launch_tid=101,
    )
    metric = GpuMetricSample(ts_ns=15, device=0, metric="gpu_util_pct", value=87.5)
    store.write_batch(
        sid, Batch(gpu_activities=(act,), gpu_metrics=(metric,), counters={"gpu_dropped": 3})
    )
    store.write_batch(sid, Batch(counters={"gpu_dropped": 2}))
    with store.engine.connect() as conn:
        assert q.gpu_activities(conn, sid) == [act]
        assert q.gpu_metrics(conn, sid) == [metric]
        assert q.counters(conn, sid) == {"gpu_dropped": 5}


def test_session_names_are_unique_and_lookup_errors_name_the_fix(store):
    a = store.create_session("run")
    b = store.create_session("run")
    with store.engine.connect() as conn:
        names = [s.name for s in q.list_sessions(conn)]
        assert names == ["run", "run-2"]
        assert q.find_session(conn, None).id == b
        assert q.find_session(conn, str(a)).name == "run"
        with pytest.raises(q.SessionNotFound, match="kubeprof sessions"):
            q.find_session(conn, "nope")


def test_unwritable_store_is_a_clear_error(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    import os

    if os.geteuid() == 0:
        with pytest.raises(StoreError, match="--store"):
            Store.open("sqlite:////proc/kubeprof-test/x.db")
    else:
        with pytest.raises(StoreError, match="not writable"):
            Store.open(f"sqlite:///{locked}/x.db")


def test_unresolved_native_frames_name_their_library():
    frame = Frame("[unknown]", FrameKind.NATIVE, "/usr/lib/x86_64-linux-gnu/libcrypto.so.3")
    assert frame.label() == "[unknown] (libcrypto.so.3)"
    assert Frame("[unknown]", FrameKind.NATIVE).label() == "[unknown]"


def test_a_store_in_a_folder_this_user_may_not_search_is_one_line(tmp_path, monkeypatch):
    """`--store sqlite:////root/x.db` as a user: stat() itself is refused (EACCES)."""
    from pathlib import Path

    from kubeprof.store_location import prepare_sqlite_path

    def refused(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "exists", refused)
    said = prepare_sqlite_path(f"sqlite:///{tmp_path}/x.db")
    assert said == (
        f"cannot read the store {tmp_path}/x.db: Permission denied; pass --store "
        "sqlite:////a/writable/path.db or set KUBEPROF_STORE"
    )
