"""Launch-bound: kernels shorter than the gaps between them; the GPU waits on launches."""

from __future__ import annotations

from collections import defaultdict

from kubeprof.analysis.findings.context import LONG_GAP_NS, Context, median, pct, us, window_words
from kubeprof.analysis.findings.model import Evidence, Finding, Kind, Severity
from kubeprof.analysis.findings.stake import graded, window_gain
from kubeprof.analysis.gpu_timeline import total
from kubeprof.analysis.kernel_names import short_name

MIN_IDLE = 0.2
MIN_SHORT_SHARE = 0.5  # of the idle time, in gaps under LONG_GAP_NS that follow no sync
GRAPH_GAP_NS = 1_000  # a kernel-to-kernel gap left inside a CUDA graph replay


def find(ctx: Context) -> Finding | None:
    idle = ctx.figures.steady.ratio
    kernels = ctx.steady_kernels
    if idle is None or idle < MIN_IDLE or len(kernels) < 2:
        return None
    synced = ctx.sync_gaps
    short = [
        (s, e)
        for dev, gaps in ctx.steady_gaps.items()
        for s, e in gaps
        if e - s < LONG_GAP_NS and (dev, s, e) not in synced
    ]
    short_ns = total(short)
    if short_ns < MIN_SHORT_SHARE * ctx.breakdown.idle_ns:
        return None
    durations = [k.end_ns - k.start_ns for k in kernels]
    gaps: list[int] = []
    end_by_dev: dict[int, int] = defaultdict(int)
    for k in kernels:
        prev = end_by_dev[k.device]
        if prev:
            gaps.append(max(0, k.start_ns - prev))
        end_by_dev[k.device] = max(prev, k.end_ns)
    med_k, med_g = median(durations), median(gaps)
    if med_k >= med_g:
        return None
    per_step = len(kernels) / ctx.steps if ctx.steps else float(len(kernels))
    saved = max(0, short_ns - GRAPH_GAP_NS * len(short))
    top = sorted({short_name(k.demangled or k.name) for k in kernels[:200]})[:5]
    message = (
        f"Launch-bound: GPU idle {pct(idle)} of {window_words(ctx)} in short gaps; "
        f"{per_step:.0f} kernels per step, median kernel {us(med_k)} vs median gap "
        f"{us(med_g)}. Capture the step in a CUDA graph (torch.cuda.graphs, "
        "torch.compile(mode='reduce-overhead')) or fuse the small ops."
    )
    numbers = {
        "steady_idle": idle,
        "kernels_per_step": per_step,
        "median_kernel_us": med_k / 1e3,
        "median_gap_us": med_g / 1e3,
        "short_gap_share_of_idle": short_ns / ctx.breakdown.idle_ns,
    }
    how = (
        f"CUDA graph replay: every gap under {LONG_GAP_NS // 1000} µs not explained by a "
        f"sync shrinks to ~{GRAPH_GAP_NS // 1000} µs"
    )
    severity = graded(ctx, short_ns, 0.5, (Severity.CRITICAL, Severity.WARNING))
    evidence = Evidence(numbers=numbers, kernels=tuple(top))
    return Finding(Kind.LAUNCH_BOUND, severity, message, evidence, window_gain(ctx, saved, how))
