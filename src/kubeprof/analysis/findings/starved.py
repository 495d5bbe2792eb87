"""GPU starved by the CPU: long stretches with nothing queued while the host prepares work.

Must not fire when the launching thread was off CPU most of those stretches, or was fed by an
input pipeline: those are ``waiting_for_work`` and ``input_starved``, whose advice differs.
"""

from __future__ import annotations

from kubeprof.analysis.findings.context import LONG_GAP_NS, Context, ms, pct, window_words
from kubeprof.analysis.findings.model import Evidence, Finding, Gain, Kind, Severity
from kubeprof.analysis.gpu_timeline import total

MIN_IDLE = 0.25  # steady-state idle share from which starvation is worth a finding
MIN_HOST_SHARE = 0.5  # of the idle time, in long host gaps


def find(ctx: Context) -> Finding | None:
    idle = ctx.figures.steady.ratio
    if idle is None or idle < MIN_IDLE:
        return None
    if ctx.waits is not None and (ctx.waits.blocked or ctx.waits.pipeline):
        return None
    long_gaps = [iv for p in ctx.parts.values() for iv in p.host if iv[1] - iv[0] >= LONG_GAP_NS]
    host_ns = total(long_gaps)
    idle_ns = ctx.breakdown.idle_ns
    if not idle_ns or host_ns < MIN_HOST_SHARE * idle_ns:
        return None
    steps = max(1, ctx.steps)
    numbers = {
        "steady_idle": idle,
        "host_wait_share": host_ns / idle_ns,
        "long_gaps": len(long_gaps),
        "long_gaps_per_step": len(long_gaps) / steps,
        "mean_long_gap_ms": host_ns / len(long_gaps) / 1e6,
    }
    frames: tuple[str, ...] = ()
    where = "no CPU samples of the launching thread: record with CPU sampling to see where"
    cpu = ctx.cpu
    if cpu is not None and cpu.samples:
        frames = tuple(f"{f.frame.label()} {pct(f.share)}" for f in cpu.frames)
        numbers["cpu_samples"] = cpu.samples
        if cpu.on_cpu_share is not None:
            numbers["launcher_on_cpu_share"] = cpu.on_cpu_share
        if cpu.hot is not None:
            where = (
                f"during it the launching thread was in `{cpu.hot.frame.label()}` "
                f"{pct(cpu.hot.share)} of its samples ({cpu.source})"
            )
    elif cpu is not None:
        where = (
            f"the launching thread was off CPU during it ({cpu.source} saw no samples): "
            "it waits on I/O, a lock, a queue or sleeps"
        )
    message = (
        f"GPU idle {pct(idle)} of {window_words(ctx)}, {pct(host_ns / idle_ns)} of it waiting on "
        f"the host ({len(long_gaps) / steps:.3g} gaps of ~{ms(host_ns / len(long_gaps))} per "
        f"step); {where}. Overlap input preparation with GPU work (DataLoader workers, "
        "prefetching, pinned-memory copies) or move it to the GPU."
    )
    return Finding(
        Kind.GPU_STARVED,
        Severity.CRITICAL if idle >= 0.5 else Severity.WARNING,
        message,
        Evidence(numbers=numbers, frames=frames),
        Gain(
            host_ns,
            host_ns / ctx.steady_ns,
            "upper bound: the host work fully overlapped with GPU work, so each step loses "
            "its long host-wait gaps (the step cannot get shorter than its GPU or its host work)",
        ),
    )
