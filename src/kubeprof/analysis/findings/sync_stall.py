"""Host-device sync stalls: ``.item()``, ``.cpu()``, ``synchronize()`` in the loop.

After a sync the host has nothing queued ahead, so the GPU idles from the sync's end until
the host launches again. A stall is an idle gap shorter than the starvation threshold that
begins at the end of a host sync record or of a device-to-host copy; longer gaps are the
host's own work (starvation) and are left to that finding.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter

from kubeprof.analysis.findings.context import Context, pct, us, user_frame
from kubeprof.analysis.findings.model import Evidence, Finding, Gain, Kind, Severity
from kubeprof.analysis.findings.starved import LONG_GAP_NS
from kubeprof.analysis.gpu_trace import HOST_SYNCS
from kubeprof.analysis.idle_breakdown import LAUNCH_GAP_NS
from kubeprof.model import GpuActivity

MIN_SHARE = 0.05  # of the steady state lost in stalls
ATTACH_NS = 20_000  # a gap starting this soon after a sync/copy ends follows from it


def find(ctx: Context) -> Finding | None:
    if ctx.figures.steady.ratio is None or ctx.steady_ns <= 0:
        return None
    window = ctx.phases.steady
    idle = ctx.trace.idle(window.start_ns, window.end_ns)
    points = [
        a
        for a in (*ctx.trace.syncs, *ctx.trace.copies)
        if ctx.in_steady(a)
        and (a.name in HOST_SYNCS or (a.kind == "memcpy" and "DtoH" in a.name))
    ]
    if not points:
        return None
    kernel_ends = [k.end_ns for k in ctx.steady_kernels]
    stalls: dict[tuple[int, int, int], GpuActivity] = {}
    before: list[int] = []
    for p in points:
        for dev in ctx.trace.devices if p.device < 0 else (p.device,):
            gaps = idle.get(dev, [])
            i = bisect_right(gaps, (p.end_ns + ATTACH_NS, 1 << 62)) - 1
            if i < 0:
                continue
            s, e = gaps[i]
            if e <= p.end_ns or e - s >= LONG_GAP_NS:
                continue
            key = (dev, s, e)
            if key not in stalls or stalls[key].kind == "sync":
                stalls[key] = p  # prefer the copy: it carries the launching stack
            j = bisect_right(kernel_ends, p.end_ns) - 1
            if j >= 0:
                k = ctx.steady_kernels[j]
                before.append(k.end_ns - k.start_ns)
    stall_ns = sum(e - s for _, s, e in stalls)
    if stall_ns < MIN_SHARE * ctx.steady_ns:
        return None
    lines = Counter()
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
        f"Host-device syncs{where} stall the GPU {pct(stall_ns / ctx.steady_ns)} of the "
        f"steady state ({per_step:.3g} per step, ~{us(stall_ns / len(stalls))} each, after "
        f"kernels of ~{us(med_before)}): avoid .item()/.cpu()/synchronize() inside the loop, "
        "keep values on the GPU or read them every N steps."
    )
    saved = sum(max(0, e - s - LAUNCH_GAP_NS) for _, s, e in stalls)
    return Finding(
        Kind.SYNC_STALL,
        Severity.CRITICAL if stall_ns >= 0.3 * ctx.steady_ns else Severity.WARNING,
        message,
        Evidence(
            numbers={
                "stalls": len(stalls),
                "stalls_per_step": per_step,
                "stall_share": stall_ns / ctx.steady_ns,
                "mean_stall_us": stall_ns / len(stalls) / 1e3,
                "median_kernel_before_us": med_before / 1e3,
            },
            lines=tuple(line for line, _ in lines.most_common(5)),
        ),
        Gain(
            saved,
            saved / ctx.steady_ns,
            "without the sync the host queues ahead and the next kernel starts at once: each "
            f"stall shrinks to a launch gap ({LAUNCH_GAP_NS // 1000} µs)",
        ),
    )
