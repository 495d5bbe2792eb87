"""GPU waiting for work: the launching thread is blocked outside any input pipeline (asleep,
waiting for requests or on the network), so the GPU idles; nothing on the GPU side helps.

Must not fire: a thread on CPU during the waits (``starved``), a thread fed by a busy input
pipeline (``input_starved``), or a window without long waits.
"""

from __future__ import annotations

from kubeprof.analysis.findings.context import Context, pct, window_words
from kubeprof.analysis.findings.model import Evidence, Finding, Kind
from kubeprof.analysis.findings.waiting import (
    long_wait,
    wait_finding,
    wait_numbers,
    where_blocked,
)


def find(ctx: Context) -> Finding | None:
    w = ctx.waits
    found = long_wait(ctx)
    if found is None or w is None or not w.blocked or w.pipeline:
        return None
    idle, wait_ns = found
    window = ctx.steady_ns
    numbers = wait_numbers(ctx, w, idle, wait_ns)
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
        window,
        "GPU time left idle while the process waited: reclaimable by giving the GPU other "
        "work (batching, sharing) or a smaller GPU; the workload itself gets no faster",
    )
