"""The web UI's off-CPU and wall views: served from the store, narrowed by time."""

from __future__ import annotations

import pytest

from kubeprof.model import Batch, CpuSample, Frame, FrameKind, OffCpuSample
from kubeprof.storage import queries
from kubeprof.storage.store import Store
from kubeprof.ui import flames
from kubeprof.ui.refs import ApiError

WORK = Frame("work", FrameKind.PYTHON, "/app/w.py", 3)
WAIT = Frame("wait", FrameKind.PYTHON, "/app/w.py", 7)
T0 = 10**12


@pytest.fixture
def session(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'k.db'}")
    sid = store.create_session("s", hz=100, start_ns=T0)
    cpu = tuple(CpuSample(T0 + i * 10**7, 5, 5, "main", 0, (WORK,)) for i in range(10))
    waits = (
        OffCpuSample(T0 + 10**8, 5, 5, "main", 4 * 10**8, 4 * 10**8, "read", "bpf-sched", (WAIT,)),
        OffCpuSample(T0 + 3 * 10**9, 5, 6, "w2", 10**9, 10**9, "futex", "bpf-sched", (WAIT,)),
    )
    store.write_batch(sid, Batch(samples=cpu, offcpu_samples=waits))
    store.finish_session(sid, end_ns=T0 + 5 * 10**9)
    with store.engine.connect() as conn:
        yield conn, queries.find_session(conn, "s")
    store.close()


def test_off_cpu_view_is_served_and_narrowed_by_time(session):
    conn, info = session
    every = flames.view_stacks(conn, info, "off-cpu")
    assert sorted(ws.value_ns for ws in every) == [4 * 10**8, 10**9]
    early = flames.view_stacks(conn, info, "off-cpu", from_s=0, to_s=1)
    assert [(ws.tid, ws.value_ns) for ws in early] == [(5, 4 * 10**8)]
    page = flames.flamegraph(conn, info, view="off-cpu")
    assert page["initial"] == "off-cpu" and page["views"]["off-cpu"]["title"] == "Off-CPU time"


def test_wall_view_adds_on_and_off_cpu(session):
    conn, info = session
    wall = flames.view_stacks(conn, info, "wall")
    main = sum(ws.value_ns for ws in wall if ws.tid == 5)
    assert main == 10 * 10**7 + 4 * 10**8  # ten 10 ms samples + a 400 ms wait
    assert any(ws.tid == 6 for ws in wall)  # the thread that only waited


def test_unknown_view_names_the_choices(session):
    conn, info = session
    with pytest.raises(ApiError, match="off-cpu or wall"):
        flames.view_stacks(conn, info, "disk")
