"""A store holding two H200 recordings (pageable copies, and the same with pinned memory)
plus a cluster session, written the way `kubeprof record` and the operator write them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from kubeprof.model import Batch, CpuSample, Frame, FrameKind, ProcessInfo
from kubeprof.storage import Store, sessions
from tests.unit.report.truth_store import store_fixture


@pytest.fixture(scope="session")
def ui_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('ui') / 'kp.db'}"
    store_fixture(url, "pageable_pinned")
    store_fixture(url, "pageable")
    store = Store.open(url)
    with store.engine.begin() as conn:
        sid = sessions.ensure(
            conn,
            "team-a/train@0123abcd",
            kind="cluster",
            command="ProfilingSession team-a/train",
            hz=99,
            started_at=datetime.now(UTC),
            meta={"pod:uid-1": "train-0", "pod:uid-2": "train-1", "api_token": "must-not-leak"},
        )
    hot = (
        Frame("main", FrameKind.PYTHON, "/app/t.py", 1),
        Frame("step", FrameKind.PYTHON, "/app/t.py", 9),
    )
    cold = (Frame("main", FrameKind.PYTHON, "/app/t.py", 1),)
    samples = tuple(CpuSample(10**9 + i * 10**7, 11, 11, "py", 0, hot) for i in range(30))
    samples += tuple(CpuSample(10**9 + i * 10**7, 22, 22, "py", 0, cold) for i in range(5))
    store.write_batch(
        sid,
        Batch(
            samples=samples,
            processes=(
                ProcessInfo(11, 1, "python3", "python3 t.py", "c1", "uid-1"),
                ProcessInfo(22, 1, "python3", "python3 t.py", "c2", "uid-2"),
            ),
        ),
        node="node-1",
    )
    store.finish_session(sid, status="Completed")
    store.close()
    return url


@pytest.fixture
def store_path(ui_store: str) -> Path:
    return Path(ui_store.removeprefix("sqlite:///"))
