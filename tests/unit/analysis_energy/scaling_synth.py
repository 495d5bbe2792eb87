"""Synthetic runs of one training loop at a given batch size, with a known step period.

Each step launches a forward and a backward GEMM that together keep the GPU busy for
``busy`` of the step, then the host works for the rest of it. GPM samples (device-wide
DRAM-bandwidth and tensor activity) are optional; NVML energy/power readings too.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubeprof.model import Batch, CpuSample, Frame, FrameKind, GpuActivity, GpuMetricSample

MS = 1_000_000
S = 1_000_000_000
T0 = 5 * S  # session start (CLOCK_MONOTONIC ns)
STARTUP = 1 * S  # interpreter start-up before the first kernel
STEP_FRAME = Frame("train_step", FrameKind.PYTHON, "/app/train.py", 42)


@dataclass(frozen=True)
class SynthRun:
    batch: int
    step_ns: int
    busy: float  # kernel-busy share of each step
    steps: int = 40
    gpm: tuple[float, float] | None = None  # (DRAM %, tensor %) during the loop

    @property
    def start_ns(self) -> int:
        return T0

    @property
    def loop_start(self) -> int:
        return T0 + STARTUP

    @property
    def end_ns(self) -> int:
        return self.loop_start + self.steps * self.step_ns + 200 * MS

    def activities(self) -> list[GpuActivity]:
        out = []
        kernel_ns = int(self.busy * self.step_ns)
        fwd, bwd = kernel_ns // 3, kernel_ns - kernel_ns // 3
        for s in range(self.steps):
            t = self.loop_start + s * self.step_ns
            out.append(GpuActivity("kernel", "fwd_gemm", t, t + fwd, 0, 100, 2 * s))
            out.append(GpuActivity("kernel", "bwd_gemm", t + fwd, t + fwd + bwd, 0, 100, 2 * s + 1))
        return out

    def gpm_metrics(self) -> list[GpuMetricSample]:
        if self.gpm is None:
            return []
        dram, tensor = self.gpm
        out = []
        for ts in range(self.start_ns, self.end_ns, 100 * MS):
            in_loop = self.loop_start <= ts
            out.append(GpuMetricSample(ts, 0, "gpm_dram_bw_pct", dram if in_loop else 1.0))
            out.append(GpuMetricSample(ts, 0, "gpm_tensor_active_pct", tensor if in_loop else 0.0))
            out.append(GpuMetricSample(ts, 0, "gpm_sm_active_pct", 90.0 if in_loop else 0.0))
        return out


def energy_metrics(start_ns: int, seconds: int, watts: float) -> list[GpuMetricSample]:
    """An energy counter read every 2 s and power read every 100 ms at a constant ``watts``."""
    out = []
    for i in range(0, seconds + 1, 2):
        out.append(GpuMetricSample(start_ns + i * S, 0, "energy_mj", 5e6 + watts * 1e3 * i))
    for i in range(seconds * 10 + 1):
        out.append(GpuMetricSample(start_ns + i * S // 10, 0, "power_mw", watts * 1e3))
    return out


def cpu_samples(start_ns: int, n: int) -> tuple[CpuSample, ...]:
    return tuple(
        CpuSample(start_ns + i * 1000, 100, 100, "python", 0, (STEP_FRAME,)) for i in range(n)
    )


def batch_of(
    run: SynthRun, *, extra: tuple[GpuMetricSample, ...] = (), samples: tuple[CpuSample, ...] = ()
) -> Batch:
    return Batch(
        samples=samples,
        gpu_activities=tuple(run.activities()),
        gpu_metrics=tuple(run.gpm_metrics()) + extra,
    )
