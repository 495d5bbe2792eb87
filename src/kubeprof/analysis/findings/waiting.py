"""The two findings on a launcher that waits while the GPU idles, and their shared words.

Input pipeline starved (``find_input_starved``): the launching thread waits on a DataLoader
(or its producers) while the GPU idles; the workers cannot keep up. Must not fire: a
pipeline that keeps up (no long waits), or a thread blocked with no pipeline behind it.

GPU waiting for work (``find_waiting_for_work``): the launching thread is blocked outside
any input pipeline (asleep, waiting for requests or on the network), so the GPU idles;
nothing on the GPU side helps. Must not fire: a thread on CPU during the waits
(``starved``), a thread fed by a busy input pipeline, or a window without long waits.
"""

from __future__ import annotations

from kubeprof.analysis.findings.context import Context, pct, window_words
from kubeprof.analysis.findings.model import Evidence, Finding, Gain, Kind, Severity
from kubeprof.analysis.host_waits import HostWaits

MIN_IDLE = 0.25  # analysed-window idle share from which waiting is worth a finding
MIN_WAIT_SHARE = 0.5  # of the idle time, in long host-wait stretches


def long_wait(ctx: Context) -> tuple[float, int] | None:
    """(idle share, long-wait ns) when the GPU idles mostly in long host waits, else None."""
    idle = ctx.figures.steady.ratio
    if idle is None or idle < MIN_IDLE or ctx.waits is None:
        return None
    wait_ns = ctx.waits.wait_ns
    if not ctx.breakdown.idle_ns or wait_ns < MIN_WAIT_SHARE * ctx.breakdown.idle_ns:
        return None
    return idle, wait_ns


def wait_numbers(ctx: Context, w: HostWaits, idle: float, wait_ns: int) -> dict[str, float]:
    """The evidence numbers both waiting findings give (shares are of the analysed window)."""
    numbers: dict[str, float] = {
        "idle_share": idle,
        "waiting_share": wait_ns / ctx.steady_ns,
        "waits": w.stretches,
        "mean_wait_ms": wait_ns / max(1, w.stretches) / 1e6,
    }
    if w.on_cpu_share is not None:
        numbers["launcher_on_cpu_share"] = w.on_cpu_share
    return numbers


def where_blocked(w: HostWaits) -> str:
    """Where the thread waited: the off-CPU stack's line, or "off CPU, no stack"."""
    off = pct(1 - w.on_cpu_share) if w.on_cpu_share is not None else "most"
    if w.wait_site is not None:
        reason = f" in `{w.wait_reason}`" if w.wait_reason else ""
        return (
            f"the launching thread was off CPU {off} of that time, blocked{reason} at "
            f"`{w.wait_site.label()}` ({w.offcpu_source} off-CPU samples)"
        )
    return (
        f"the launching thread was off CPU {off} of that time (off CPU, no stack: this "
        "session has no off-CPU samples; record with the BPF sampler or py-spy idle "
        "sampling to see where it blocked)"
    )


def wait_finding(
    kind: Kind, message: str, evidence: Evidence, wait_ns: int, window: int, gain_words: str
) -> Finding:
    """The finding on a launcher that waits: CRITICAL when the waits hold half the analysed
    window or more, else WARNING; what is at stake is the time spent waiting."""
    severity = Severity.CRITICAL if wait_ns >= 0.5 * window else Severity.WARNING
    return Finding(kind, severity, message, evidence, Gain(wait_ns, wait_ns / window, gain_words))


def _launcher_waits(
    ctx: Context, *, behind_pipeline: bool
) -> tuple[HostWaits, float, int, dict[str, float]] | None:
    """(waits, idle share, long-wait ns, evidence numbers) when the GPU idles mostly in long
    host waits of a launcher that waits on a busy input pipeline (`behind_pipeline`) or is
    blocked with none behind it; else None."""
    w, found = ctx.waits, long_wait(ctx)
    if found is None or w is None:
        return None
    if not (w.pipeline if behind_pipeline else w.blocked and not w.pipeline):
        return None
    idle, wait_ns = found
    return w, idle, wait_ns, wait_numbers(ctx, w, idle, wait_ns)


def find_input_starved(ctx: Context) -> Finding | None:
    found = _launcher_waits(ctx, behind_pipeline=True)
    if found is None:
        return None
    w, idle, wait_ns, numbers = found
    lines: list[str] = []
    frames: list[str] = []
    pull = ""
    if w.pipeline_site is not None:
        lines.append(w.pipeline_site.line())
        pull = f" at `{w.pipeline_site.label()}`"
    workers = ""
    if w.workers is not None:
        numbers["worker_processes"] = w.workers.processes
        numbers["worker_cores"] = w.workers.cores
        workers = (
            f"; its {w.workers.processes} worker process(es) were on CPU "
            f"{w.workers.cores:.2g} cores meanwhile"
        )
        if w.workers.hot is not None:
            hot = w.workers.hot
            lines.append(hot.line())
            frames.append(f"{hot.label()} {pct(hot.share)}")
            workers += f", {pct(hot.share)} of their samples in `{hot.label()}`"
    blocked = where_blocked(w) if w.blocked else "the launching thread was mostly on CPU"
    message = (
        f"Input pipeline starved: GPU idle {pct(idle)} of {window_words(ctx)}; the main "
        f"thread waits for the next batch from the DataLoader{pull} ({wait_ns / 1e9:.2f} s "
        f"in {w.stretches:,} waits; {blocked}){workers}. Raise num_workers, "
        "prefetch_factor, set persistent_workers=True, or make __getitem__ cheaper "
        "(decode/augment on the GPU, pre-process offline)."
    )
    return wait_finding(
        Kind.INPUT_STARVED,
        message,
        Evidence(numbers=numbers, frames=tuple(frames), lines=tuple(lines)),
        wait_ns,
        ctx.steady_ns,
        "upper bound: batches ready whenever the loop asks, so each step loses its long "
        "waits (the step cannot get shorter than its GPU or its own host work)",
    )


def find_waiting_for_work(ctx: Context) -> Finding | None:
    found = _launcher_waits(ctx, behind_pipeline=False)
    if found is None:
        return None
    w, idle, wait_ns, numbers = found
    lines = []
    if w.wait_site is not None:
        lines.append(w.wait_site.line())
    resume = ""
    if w.resume_site is not None:
        lines.append(w.resume_site.line())
        resume = f"; each wait ends when `{w.resume_site.label()}` launches work"
    message = (
        f"GPU waiting for work: idle {pct(idle)} of {window_words(ctx)}, "
        f"{wait_ns / 1e9:.2f} s of it in {w.stretches:,} waits of ~"
        f"{wait_ns / max(1, w.stretches) / 1e6:.3g} ms with nothing queued; "
        f"{where_blocked(w)}, and no input pipeline was busy behind it{resume}. The GPU is "
        "not the bottleneck: batch requests (dynamic batching), share the GPU (MPS, "
        "time-slicing, MIG) or move to a smaller GPU; CUDA graphs or faster kernels "
        "will not help."
    )
    return wait_finding(
        Kind.WAITING_FOR_WORK,
        message,
        Evidence(numbers=numbers, lines=tuple(lines)),
        wait_ns,
        ctx.steady_ns,
        "GPU time left idle while the process waited: reclaimable by giving the GPU other "
        "work (batching, sharing) or a smaller GPU; the workload itself gets no faster",
    )
