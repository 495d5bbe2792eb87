"""Synthetic GPU traces with a known truth: a start-up, a warm-up, then a loop of steps.

Each step launches ``kernels`` kernels of ``kernel_ns`` separated by ``gap_ns`` (launch
gaps), then the host works ``host_ns`` with nothing queued (the data step). The main loop's
true idle ratio is what a CUDA-event measurement around it would report.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubeprof.model import CpuSample, Frame, FrameKind, GpuActivity, GpuMetricSample

SCRIPT = "/app/train.py"
MODULE = Frame("<module>", FrameKind.PYTHON, SCRIPT, 90)
MAIN = Frame("main", FrameKind.PYTHON, SCRIPT, 70)
STEP = Frame("train_step", FrameKind.PYTHON, SCRIPT, 42)
LOAD = Frame("load_batch", FrameKind.PYTHON, "/app/data.py", 12)
DECODE = Frame("decode", FrameKind.PYTHON, "/app/data.py", 30)
LAUNCH = Frame("cudaLaunchKernel", FrameKind.CUDA_API)
GEMM = "nvjet_sm90_tst_256x128_gemm"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, AddFunctor>(int)"
MS = 1_000_000
US = 1_000


@dataclass
class Loop:
    steps: int = 100
    kernels: int = 20
    kernel_ns: int = 500 * US
    gap_ns: int = 3 * US
    host_ns: int = 0
    kernel_name: str = GEMM
    startup_ns: int = 3_000 * MS
    warmup_steps: int = 3  # slow first steps (allocation, autotuning)
    step_frame: Frame = STEP
    t0: int = 10_000 * MS
    pid: int = 100
    acts: list[GpuActivity] = field(default_factory=list)
    loop_start: int = 0
    loop_end: int = 0
    busy_in_loop: int = 0

    @property
    def stack(self) -> tuple[Frame, ...]:
        return (MODULE, MAIN, self.step_frame, LAUNCH)

    def kernel(self, t: int, dur: int, name: str | None = None, corr: int = 0) -> GpuActivity:
        return GpuActivity(
            "kernel",
            name or self.kernel_name,
            t,
            t + dur,
            0,
            self.pid,
            corr,
            stream=7,
            demangled=name or self.kernel_name,
            stack=self.stack,
        )

    def build(self) -> Loop:
        t = self.t0 + self.startup_ns
        # warm-up: a few autotuning candidates, then slow first steps
        for i in range(30):
            self.acts.append(self.kernel(t, 200 * US, f"autotune_candidate_{i}"))
            t += 20 * MS
        for s in range(self.warmup_steps + self.steps):
            if s == self.warmup_steps:
                self.loop_start = t
            t = self.one_step(t, s, slow=s < self.warmup_steps)
        self.loop_end = t
        return self

    def one_step(self, t: int, s: int, slow: bool) -> int:
        for i in range(self.kernels):
            self.acts.append(self.kernel(t, self.kernel_ns, corr=s * 1000 + i))
            if not slow and s >= self.warmup_steps:
                self.busy_in_loop += self.kernel_ns
            t += self.kernel_ns + self.gap_ns * (20 if slow else 1)
        return t + self.host_ns + (50 * MS if slow else 0)

    @property
    def truth(self) -> float:
        return 1 - self.busy_in_loop / (self.loop_end - self.loop_start)

    @property
    def session(self) -> tuple[int, int]:
        return self.t0, self.loop_end + 500 * MS


def cpu_samples(loop: Loop, hz: float = 1000.0) -> list[CpuSample]:
    """The launching thread at ``hz``: in load_batch/decode during host time, train_step
    otherwise; a second thread (a logger) always in its own frame."""
    out = []
    period = int(1e9 / hz)
    busy = sorted((a.start_ns, a.end_ns) for a in loop.acts if a.kind == "kernel")
    ends = [e for _, e in busy]
    import bisect

    for ts in range(loop.t0, loop.loop_end, period):
        i = bisect.bisect_right(ends, ts)
        # host phase of a step: the stretch after a step's last kernel, longer than a gap
        nxt = busy[i][0] if i < len(busy) else loop.loop_end
        prev = ends[i - 1] if i else loop.t0
        in_host = nxt - prev > 1 * MS and prev <= ts < nxt
        if in_host and ts >= loop.loop_start:
            leaf = DECODE if (ts // period) % 4 == 0 else LOAD
            stack = (MODULE, MAIN, LOAD, leaf) if leaf is DECODE else (MODULE, MAIN, LOAD)
        else:
            stack = (MODULE, MAIN, loop.step_frame)
        out.append(CpuSample(ts, loop.pid, loop.pid, "python", 0, stack))
        other = (
            Frame("_bootstrap", FrameKind.PYTHON, "/usr/lib/python3.12/threading.py", 1),
            Frame("log_loop", FrameKind.PYTHON, "/app/log.py", 5),
        )
        out.append(CpuSample(ts + 1, loop.pid, loop.pid + 1, "logger", 1, other))
    return out


def gpm(loop: Loop, dram: float, tensor: float, every_ns: int = 100 * MS) -> list[GpuMetricSample]:
    out = []
    for ts in range(loop.t0, loop.loop_end, every_ns):
        out.append(GpuMetricSample(ts, 0, "gpm_dram_bw_pct", dram))
        out.append(GpuMetricSample(ts, 0, "gpm_tensor_active_pct", tensor))
        out.append(GpuMetricSample(ts, 0, "gpm_sm_active_pct", 80.0))
    return out
