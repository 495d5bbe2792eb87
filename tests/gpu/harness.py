"""Run a command with the GPU tracer injected and a receiver (+ NVML) listening: a mini recorder.

Used by the GPU tests and the overhead benchmark until ``kubeprof record --gpu`` is used
end to end; it calls the same public pieces the recorder calls.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from kubeprof.agent.gpu.inject import tracer_env
from kubeprof.agent.gpu.receiver import GpuReceiver
from kubeprof.model import GpuActivity, GpuMetricSample

REPO = Path(__file__).resolve().parents[2]
NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


@dataclass
class Traced:
    returncode: int
    stdout: str
    stderr: str
    start_ns: int
    end_ns: int
    activities: list[GpuActivity] = field(default_factory=list)
    metrics: list[GpuMetricSample] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    targets: dict[int, dict] = field(default_factory=dict)  # pid -> its tracer's hello

    @property
    def kernels(self) -> list[GpuActivity]:
        return [a for a in self.activities if a.kind == "kernel"]


def run_traced(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 300,
    nvml: bool = False,
    kill_after_s: float | None = None,
) -> Traced:
    """Run ``argv`` traced; ``kill_after_s`` SIGKILLs it mid-trace (to test that path)."""
    tmp = tempfile.mkdtemp(prefix="kpgpu-")
    sock = os.path.join(tmp, "gpu.sock")
    rx = GpuReceiver(sock)
    rx.start()
    sampler = None
    if nvml:
        from kubeprof.agent.gpu.nvml import NvmlSampler

        sampler = NvmlSampler(0.1)
        sampler.start()
    child_env = {**os.environ, **NO_MULTICAST, **tracer_env(sock), **(env or {})}
    out = Traced(0, "", "", time.monotonic_ns(), 0)
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        proc = subprocess.Popen(argv, env=child_env, stdout=so, stderr=se, cwd=REPO)
        deadline = time.monotonic() + timeout_s
        killed = False
        while proc.poll() is None:
            if (
                kill_after_s is not None
                and not killed
                and time.monotonic() - out.start_ns / 1e9 > kill_after_s
            ):
                proc.kill()
                killed = True
            if time.monotonic() > deadline:
                proc.kill()
            _take(out, rx.poll())
            if sampler:
                _take(out, sampler.poll())
            time.sleep(0.2)
        out.end_ns = time.monotonic_ns()
        out.returncode = proc.returncode
        _take(out, rx.stop())
        if sampler:
            _take(out, sampler.stop())
        so.seek(0)
        se.seek(0)
        out.stdout, out.stderr = so.read(), se.read()
    out.messages = list(rx.messages)
    out.targets = dict(rx.targets)
    return out


def _take(out: Traced, batch: object) -> None:
    out.activities.extend(batch.gpu_activities)  # type: ignore[attr-defined]
    out.metrics.extend(batch.gpu_metrics)  # type: ignore[attr-defined]
    for k, v in batch.counters.items():  # type: ignore[attr-defined]
        out.counters[k] = out.counters.get(k, 0) + v


def python() -> str:
    return sys.executable
