"""Why GPU tracing was off reaches the session: the tracer names the module that is really
missing, the receiver turns what tracers said into session meta, `kubeprof record` stores it
and the report says it instead of showing GPU figures."""

from __future__ import annotations

import os
import sys
import types

import pytest

from kubeprof.agent.gpu import inject
from kubeprof.agent.gpu import tracer as tracer_mod
from kubeprof.agent.gpu.receiver import GpuReceiver
from kubeprof.agent.gpu.tracer import CuptiTracer, TracerConfig, TracerError, import_failure
from kubeprof.agent.gpu.wire import Sender
from kubeprof.agent.record import RecordOptions, record
from kubeprof.model import Batch, CpuSample, Frame, FrameKind
from kubeprof.storage import Store
from kubeprof.storage import queries as q


@pytest.fixture
def cupti_without_elftools(monkeypatch):
    """cupti-python installed, its dependency elftools (pyelftools) not: as on the H200."""

    class BrokenCupti(types.ModuleType):
        def __getattr__(self, name: str):
            if name == "cupti":
                import elftools  # noqa: F401 - fails: None in sys.modules
            raise AttributeError(name)

    monkeypatch.setitem(sys.modules, "cupti", BrokenCupti("cupti"))
    monkeypatch.delitem(sys.modules, "cupti.cupti", raising=False)
    monkeypatch.setitem(sys.modules, "elftools", None)
    monkeypatch.setattr(tracer_mod, "preflight", lambda: None)


def test_import_failure_names_the_missing_dependency():
    dep = ModuleNotFoundError("No module named 'elftools'", name="elftools")
    text = import_failure(dep)
    assert "'elftools' is missing" in text and "pip install pyelftools" in text
    assert "cupti-python is not importable" not in text
    own = ModuleNotFoundError("No module named 'cupti'", name="cupti")
    assert "cupti-python is not importable" in import_failure(own)
    assert "pip install cupti-python" in import_failure(own)
    other = ModuleNotFoundError("No module named 'numpy.core'", name="numpy.core")
    assert "'numpy' is missing" in import_failure(other) and "pip install numpy" in import_failure(
        other
    )


def test_tracer_start_reports_elftools_not_cupti_python(cupti_without_elftools, tmp_path):
    tracer = CuptiTracer(Sender(str(tmp_path / "none.sock")), TracerConfig())
    with pytest.raises(TracerError) as err:
        tracer.start()
    assert "elftools" in str(err.value) and "pip install pyelftools" in str(err.value)
    assert "is not importable" not in str(err.value)


def test_receiver_status_carries_the_tracers_error(cupti_without_elftools, tmp_path, monkeypatch):
    path = str(tmp_path / "gpu.sock")
    rx = GpuReceiver(path)
    rx.start()
    monkeypatch.setenv(inject.ENV_SOCKET, path)
    monkeypatch.setenv("KUBEPROF_GPU_QUIET", "1")
    monkeypatch.setattr(inject, "_tracer", None)
    assert inject.bootstrap() is None  # tracing off, the workload goes on
    rx.stop(2.0)
    status = rx.tracer_status()
    assert status["gpu_tracer"] == "off"
    assert "elftools" in status["gpu_tracer_reason"]
    assert f"pid {os.getpid()}" in status["gpu_tracer_reason"]


def test_receiver_status_on_when_a_tracer_started(fake, tmp_path):  # fake: conftest's cupti
    path = str(tmp_path / "gpu.sock")
    rx = GpuReceiver(path)
    rx.start()
    tx = Sender(path, interval_s=0.02)
    tr = CuptiTracer(tx, TracerConfig(kinds=("kernel",)))
    tr.start()
    tx.start()
    tr.stop()
    rx.stop(2.0)
    assert rx.tracer_status() == {"gpu_tracer": "on"}


def test_receiver_status_when_no_tracer_connected(tmp_path):
    rx = GpuReceiver(str(tmp_path / "gpu.sock"))
    rx.start()
    rx.stop(0.5)
    status = rx.tracer_status()
    assert status["gpu_tracer"] == "off"
    assert "no process loaded the GPU tracer" in status["gpu_tracer_reason"]


class SilentGpu:
    """A GPU receiver stand-in whose tracer failed; CPU samples come from another source."""

    def add_target(self, pid: int) -> None:
        pass

    def poll(self) -> Batch:
        return Batch()

    def stop(self) -> Batch:
        return Batch()

    def tracer_status(self) -> dict[str, str]:
        return {
            "gpu_tracer": "off",
            "gpu_tracer_reason": "cupti-python is installed but its "
            "dependency 'elftools' is missing; pip install pyelftools (pid 7)",
        }


class OneSample:
    """One sample, handed out at the first poll or, like a real collector's held data, at
    stop when no poll came (a command that exits before the store has opened)."""

    given = False

    def add_target(self, pid: int) -> None:
        pass

    def poll(self) -> Batch:
        st = (Frame("main", FrameKind.PYTHON, "/x.py", 1),)
        self.given = True
        return Batch(samples=(CpuSample(1, 7, 7, "python3", 0, st),))

    def stop(self) -> Batch:
        return Batch() if self.given else self.poll()


def test_record_stores_the_status_and_the_report_says_tracing_was_off(tmp_path):
    url = f"sqlite:///{tmp_path}/r.db"
    res = record(
        RecordOptions(
            command=[sys.executable, "-c", "pass"],
            store_url=url,
            sources=[OneSample(), SilentGpu()],
            poll_interval_s=0.05,
            name="off",
            gpu=True,
        )
    )
    assert any("GPU tracing was off" in w and "elftools" in w for w in res.warnings)
    store = Store.open(url)
    with store.engine.connect() as conn:
        meta = q.find_session(conn, "off").meta
    store.close()
    assert meta["gpu_tracer"] == "off" and "elftools" in meta["gpu_tracer_reason"]

    from kubeprof import reporting
    from kubeprof.report.formats import render

    text = render(reporting.load(url, "off"), "text")
    assert (
        "GPU idle: not measured (GPU tracing was off: cupti-python is installed but its "
        "dependency 'elftools' is missing" in " ".join(text.split())
    )
    assert " 0.0 %" not in text and "100.0 %" not in text.split("== CPU time")[0]
