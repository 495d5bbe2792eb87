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
    # `fake` runs the Python launch callback (as an install without the C hook would)
    assert rx.tracer_status().keys() == {"gpu_tracer", "gpu_launch_hook"}
    assert rx.tracer_status()["gpu_tracer"] == "on"


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


def _status_of_a_started_tracer(tmp_path, config: TracerConfig) -> dict[str, str]:
    path = str(tmp_path / "gpu.sock")
    rx = GpuReceiver(path)
    rx.start()
    tx = Sender(path, interval_s=0.02)
    tr = CuptiTracer(tx, config)
    tr.start()
    tx.start()
    tr.stop()
    rx.stop(2.0)
    return rx.tracer_status()


def test_status_says_when_the_python_launch_callback_ran_because_the_c_hook_is_not_built(
    fake, tmp_path, monkeypatch
):
    """An install without _launchhook.so (a pip install with no C compiler) still traces,
    with the slower Python callback: the session's meta says so and how to build the hook."""
    monkeypatch.setattr(tracer_mod, "load_hook", lambda mode: None)
    status = _status_of_a_started_tracer(tmp_path, TracerConfig(kinds=("kernel",)))
    assert status["gpu_tracer"] == "on"
    hook = status["gpu_launch_hook"]
    assert hook.startswith("Python callback, slower per launch, in pid ")
    assert "not built" in hook and "scripts/build_launchhook.sh" in hook


def test_status_names_kubeprof_gpu_hook_python_when_asked_for(fake, tmp_path):
    status = _status_of_a_started_tracer(tmp_path, TracerConfig(kinds=("kernel",), hook="python"))
    assert "as KUBEPROF_GPU_HOOK=python asked" in status["gpu_launch_hook"]
    assert "not built" not in status["gpu_launch_hook"]


class PythonHookGpu(SilentGpu):
    """A GPU receiver stand-in whose tracer ran the Python launch callback."""

    def tracer_status(self) -> dict[str, str]:
        return {
            "gpu_tracer": "on",
            "gpu_launch_hook": "Python callback, slower per launch, in pid 7: the C launch "
            "hook (_launchhook) is not built",
        }


def test_record_warns_and_the_report_header_names_the_python_launch_callback(tmp_path):
    url = f"sqlite:///{tmp_path}/r.db"
    res = record(
        RecordOptions(
            command=[sys.executable, "-c", "pass"],
            store_url=url,
            sources=[OneSample(), PythonHookGpu()],
            poll_interval_s=0.05,
            name="pyhook",
            gpu=True,
        )
    )
    assert any("Python callback, slower per launch" in w for w in res.warnings)
    from kubeprof import reporting
    from kubeprof.report.formats import render

    text = " ".join(render(reporting.load(url, "pyhook"), "text").split())
    assert "gpu launch hook: Python callback, slower per launch, in pid 7" in text
