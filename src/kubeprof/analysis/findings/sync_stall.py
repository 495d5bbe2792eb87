"""Host-device sync stalls: ``.item()``, ``.cpu()``, ``synchronize()`` in the loop.

After a sync the host has nothing queued ahead, so the GPU idles from the sync's end until
the host launches again (``Context.sync_gaps`` finds those gaps).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter

from kubeprof.analysis.findings.context import Context, pct, us, user_frame, window_words
from kubeprof.analysis.findings.model import Evidence, Finding, Kind, Severity
from kubeprof.analysis.findings.stake import graded, window_gain
from kubeprof.analysis.idle_breakdown import LAUNCH_GAP_NS

MIN_SHARE = 0.05  # of the steady state lost in stalls


def find(ctx: Context) -> Finding | None:
    if ctx.figures.steady.ratio is None or ctx.steady_ns <= 0:
        return None
    stalls = ctx.sync_gaps
    if not stalls:
        return None
    kernel_ends = [k.end_ns for k in ctx.steady_kernels]
    before: list[int] = []
    for p in stalls.values():
        j = bisect_right(kernel_ends, p.end_ns) - 1
        if j >= 0:
            k = ctx.steady_kernels[j]
            before.append(k.end_ns - k.start_ns)
    stall_ns = sum(e - s for _, s, e in stalls)
    if stall_ns < MIN_SHARE * ctx.steady_ns:
        return None
    lines: Counter[str] = Counter()
    for p in stalls.values():
        f = user_frame(p.stack)
        if f is not None:
            lines[f"{f.file}:{f.line} {f.name}"] += 1
    per_step = len(stalls) / ctx.steps if ctx.steps else float(len(stalls))
    before.sort()
    med_before = before[len(before) // 2] if before else 0
    where = ""
    if lines:
        top = lines.most_common(1)[0][0]
        where = f" at {top.split(' ')[0].rsplit('/', 1)[-1]}"
    message = (
        f"Host-device syncs{where} stall the GPU {pct(stall_ns / ctx.steady_ns)} of "
        f"{window_words(ctx)} ({per_step:.3g} per step, ~{us(stall_ns / len(stalls))} each, after "
        f"kernels of ~{us(med_before)}): avoid .item()/.cpu()/synchronize() inside the loop, "
        "keep values on the GPU or read them every N steps."
    )
    saved = sum(max(0, e - s - LAUNCH_GAP_NS) for _, s, e in stalls)
    numbers = {
        "stalls": len(stalls),
        "stalls_per_step": per_step,
        "stall_share": stall_ns / ctx.steady_ns,
        "mean_stall_us": stall_ns / len(stalls) / 1e3,
        "median_kernel_before_us": med_before / 1e3,
    }
    how = (
        "without the sync the host queues ahead and the next kernel starts at once: each "
        f"stall shrinks to a launch gap ({LAUNCH_GAP_NS // 1000} µs)"
    )
    severity = graded(ctx, stall_ns, 0.3, (Severity.CRITICAL, Severity.WARNING))
    evidence = Evidence(numbers=numbers, lines=tuple(line for line, _ in lines.most_common(5)))
    return Finding(Kind.SYNC_STALL, severity, message, evidence, window_gain(ctx, saved, how))
