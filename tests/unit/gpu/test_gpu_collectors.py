"""NVML sampler against a fake pynvml; injection and the receiver's failure accounting."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from types import SimpleNamespace

import pytest

from kubeprof.agent.gpu.inject import site_dir, tracer_env
from kubeprof.agent.gpu.nvml import NvmlError, NvmlSampler
from kubeprof.agent.gpu.receiver import GpuReceiver
from kubeprof.agent.gpu.wire import Sender


class _NVMLError(Exception):
    pass


def fake_pynvml(count: int = 1, init_error: bool = False) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVMLError = _NVMLError
    m.NVML_CLOCK_SM = 1
    m.NVML_GPM_METRICS_GET_VERSION = 1

    def init() -> None:
        if init_error:
            raise _NVMLError("Driver Not Loaded")

    m.nvmlInit = init
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: count
    m.nvmlDeviceGetHandleByIndex = lambda i: f"h{i}"
    m.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=87, memory=20)
    m.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(used=1 << 30, total=141 << 30)
    m.nvmlDeviceGetPowerUsage = lambda h: 650_000
    m.nvmlDeviceGetClockInfo = lambda h, c: 1980
    m.nvmlDeviceGetTotalEnergyConsumption = lambda h: 123
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [SimpleNamespace(pid=42, usedGpuMemory=5)]

    def proc_util(h, ts):
        if ts:
            raise _NVMLError("Not Found")  # nothing new since last time
        return [SimpleNamespace(pid=42, timeStamp=10, smUtil=90, memUtil=30)]

    m.nvmlDeviceGetProcessUtilization = proc_util
    m.nvmlGpmQueryDeviceSupport = lambda h: SimpleNamespace(isSupportedDevice=0)
    return m


def test_nvml_sampler_device_and_process_metrics(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    s = NvmlSampler(0.01, process_interval_s=0.01)
    s.start()
    time.sleep(0.1)
    batch = s.stop()
    names = {m.metric for m in batch.gpu_metrics}
    assert {"gpu_util_pct", "mem_used_bytes", "power_mw", "sm_clock_mhz", "energy_mj"} <= names
    procs = [m for m in batch.gpu_metrics if m.pid == 42]
    assert {m.metric for m in procs} == {
        "proc_mem_used_bytes",
        "proc_sm_util_pct",
        "proc_mem_util_pct",
    }
    assert sum(1 for m in procs if m.metric == "proc_sm_util_pct") == 1  # not repeated


def test_nvml_errors_are_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error=True))
    with pytest.raises(NvmlError, match="no NVML: Driver Not Loaded"):
        NvmlSampler().start()
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(count=0))
    with pytest.raises(NvmlError, match="no GPU"):
        NvmlSampler().start()


def test_tracer_env_puts_sitecustomize_and_kubeprof_first():
    env = tracer_env("/run/x.sock", base={"PYTHONPATH": "/user"}, stacks="full")
    parts = env["PYTHONPATH"].split(os.pathsep)
    assert parts[0] == site_dir() and parts[-1] == "/user"
    assert env["KUBEPROF_GPU_SOCKET"] == "/run/x.sock" and env["KUBEPROF_GPU_STACKS"] == "full"


def test_workload_runs_on_when_tracing_cannot_start(tmp_path):
    """No GPU/driver here (CI), or anything else wrong: one line, exit code untouched."""
    sock = str(tmp_path / "gpu.sock")
    rx = GpuReceiver(sock)
    rx.start()
    env = {**os.environ, **tracer_env(sock)}
    env["KUBEPROF_GPU_KINDS"] = "kernel,bogus"  # fails config even where a GPU exists
    p = subprocess.run(
        [sys.executable, "-c", "import sys; print('ran'); sys.exit(7)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    rx.stop(2.0)
    assert p.returncode == 7 and p.stdout == "ran\n"
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("kubeprof-gpu:")]
    assert len(lines) == 1 and "GPU tracing off" in lines[0]
    assert any("unknown KUBEPROF_GPU_KINDS" in m for m in rx.messages)


def test_receiver_counts_targets_that_die_without_goodbye(tmp_path):
    sock = str(tmp_path / "gpu.sock")
    rx = GpuReceiver(sock)
    rx.start()
    tx = Sender(sock)
    tx.put("launch", (1, 0, 0, 1, 5, 1))
    tx.drain_and_send()
    tx._drop_connection()  # as if SIGKILLed: no final frame
    batch = rx.stop(2.0)
    assert batch.counters.get("gpu_target_exited_early") == 1
    assert any("exited before" in m for m in rx.messages)
