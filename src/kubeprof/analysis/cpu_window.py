"""The CPU profile of one time window: a report's CPU view follows the analysed window.

A server's session spends seconds importing and loading its model before the first request;
over the whole session its CPU profile is mostly importlib. The view a person acts on is the
window the GPU analysis judged (the steady state, or the active window after warm-up), with
start-up, warm-up and tail left out and said so. Pure: built from the sample columns.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from kubeprof.analysis.cpu_samples import SampleColumns
from kubeprof.analysis.phases import Window
from kubeprof.model import WeightedStack


def window_stacks(
    cpu: SampleColumns, window: Window, process: Mapping[int, str]
) -> tuple[WeightedStack, ...]:
    """Weighted stacks (per pid, tid and stack) of the samples in ``window``; ``process``
    names each pid as the whole-session profile did."""
    period = int(cpu.period_ns)  # as the stored profile counts it (queries._weighted)
    out = []
    for t in cpu.threads:
        i, j = t.span(window.start_ns, window.end_ns)
        for sid, n in sorted(Counter(t.stack_ids[i:j]).items()):
            out.append(
                WeightedStack(
                    cpu.stacks[sid],
                    t.pid,
                    t.tid,
                    t.thread,
                    process.get(t.pid, str(t.pid)),
                    n,
                    n * period,
                )
            )
    return tuple(out)


def samples_in(cpu: SampleColumns, window: Window) -> tuple[int, int]:
    """(samples in ``window``, all samples)."""
    inside = every = 0
    for t in cpu.threads:
        i, j = t.span(window.start_ns, window.end_ns)
        inside += j - i
        every += len(t.ts_ns)
    return inside, every
