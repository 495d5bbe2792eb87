"""Input pipeline starved: the launching thread waits on a DataLoader (or its producers)
while the GPU idles; the workers cannot keep up.

Must not fire: a pipeline that keeps up (no long waits), or a thread blocked with no
pipeline behind it (``waiting_for_work``).
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
    if found is None or w is None or not w.pipeline:
        return None
    idle, wait_ns = found
    window = ctx.steady_ns
    numbers = wait_numbers(ctx, w, idle, wait_ns)
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
        window,
        "upper bound: batches ready whenever the loop asks, so each step loses its long "
        "waits (the step cannot get shorter than its GPU or its own host work)",
    )
