"""What the launching thread did while the GPU sat idle: CPU stacks during idle stretches.

"GPU idle 71 % of the steady state; during it the launching thread was in
``load_batch (data.py:42)`` 88 % of its samples." The launching thread is the thread of a
kernel-launching process whose samples share the root Python frame of the kernels' launch
stacks (the training script's ``<module>``), else the process's main thread. Its samples in
each idle stretch are counted by bisection on its sorted timestamps, then aggregated.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from kubeprof.analysis.cpu_samples import SampleColumns, ThreadSamples
from kubeprof.analysis.gpu_timeline import Interval, total
from kubeprof.analysis.gpu_trace import GpuTrace
from kubeprof.analysis.phases import Window
from kubeprof.model import Frame, FrameKind, Stack

HOT_SHARE = 0.5  # the hot frame is the deepest one present in at least this share of samples
TOP = 8


# Plain result records (like gpu_summary's MetricSummary in shape only).
@dataclass(frozen=True, slots=True)
class FrameShare:
    """A frame and the share of the samples it is in (inclusive) or at the leaf of (self)."""

    frame: Frame
    samples: int
    share: float


@dataclass(frozen=True, slots=True)
class StackShare:
    stack: Stack
    samples: int
    share: float


@dataclass(frozen=True, slots=True)
class CpuDuringIdle:
    """The launching thread's CPU samples during the GPU's idle stretches of a window."""

    source: str  # "bpf" or "py-spy"
    pid: int
    tid: int
    thread: str
    idle_ns: int  # length of the stretches looked at
    stretches: int
    samples: int
    on_cpu_share: float | None  # samples x period / idle time (None without a known rate)
    hot: FrameShare | None  # deepest frame in >= HOT_SHARE of the samples
    frames: tuple[FrameShare, ...]  # top frames, inclusive
    leaves: tuple[FrameShare, ...]  # top leaf (innermost) frames, self
    stacks: tuple[StackShare, ...]  # top whole stacks


def launching_thread(
    columns: SampleColumns, trace: GpuTrace, window: Window
) -> ThreadSamples | None:
    """The thread that launched the kernels (see the module docstring)."""
    threads = columns.of_pids(trace.pids)
    if not threads:
        return None
    launch_stacks = {id(k.stack): k.stack for k in trace.kernels}
    roots = {r for st in launch_stacks.values() if (r := _root(st)) is not None}
    root_cache: dict[int, bool] = {}
    best, best_score = None, 0
    for t in threads:
        i, j = t.span(window.start_ns, window.end_ns)
        score = 0
        for sid, n in Counter(t.stack_ids[i:j]).items():
            hit = root_cache.get(sid)
            if hit is None:
                hit = root_cache[sid] = _root(columns.stacks[sid]) in roots
            if hit:
                score += n
        if score > best_score:
            best, best_score = t, score
    if best is not None:
        return best
    main = [t for t in threads if t.tid == t.pid]
    return main[0] if main else max(threads, key=lambda t: len(t.ts_ns))


def during(
    columns: SampleColumns,
    thread: ThreadSamples,
    stretches: Sequence[Interval],
) -> CpuDuringIdle:
    """Aggregate ``thread``'s samples falling in the (sorted) idle ``stretches``."""
    counts = thread.counts_in(stretches)
    n = sum(counts.values())
    idle = total(stretches)
    period = columns.period_ns
    inclusive: Counter[Frame] = Counter()
    depth: dict[Frame, int] = {}
    leaves: Counter[Frame] = Counter()
    stacks: Counter[Stack] = Counter()
    for sid, c in counts.items():
        frames = _interesting(columns.stacks[sid])
        stacks[frames] += c
        if frames:
            leaves[frames[-1]] += c
        for d, f in enumerate(frames):
            if f not in depth or d < depth[f]:
                depth[f] = d
        for f in dict.fromkeys(frames):  # unique, in stack order: ties rank the same every run
            inclusive[f] += c
    hot = None
    if n:
        deep = [f for f, c in inclusive.items() if c >= HOT_SHARE * n]
        if deep:
            f = max(deep, key=lambda f: (depth[f], inclusive[f]))
            hot = FrameShare(f, inclusive[f], inclusive[f] / n)
    return CpuDuringIdle(
        source=columns.source,
        pid=thread.pid,
        tid=thread.tid,
        thread=thread.thread,
        idle_ns=idle,
        stretches=len(stretches),
        samples=n,
        on_cpu_share=min(1.0, n * period / idle) if idle and period else None,
        hot=hot,
        frames=_top(inclusive, n),
        leaves=_top(leaves, n),
        stacks=tuple(
            StackShare(s, c, c / n)
            for s, c in sorted(stacks.items(), key=lambda sc: (-sc[1], [f.label() for f in sc[0]]))[
                :TOP
            ]
        ),
    )


def _top(counter: Counter[Frame], n: int) -> tuple[FrameShare, ...]:
    """The TOP most counted frames; equal counts by label, so the order never depends on
    hashing (PYTHONHASHSEED)."""
    ranked = sorted(counter.items(), key=lambda fc: (-fc[1], fc[0].label()))[:TOP]
    return tuple(FrameShare(f, c, c / n) for f, c in ranked)


def _root(stack: Stack) -> tuple[str, str] | None:
    for f in stack:
        if f.kind is FrameKind.PYTHON:
            return (f.name, f.file)
    return None


def _interesting(stack: Stack) -> Stack:
    """Python frames when the stack has any (what a person edits), else the whole stack."""
    py = tuple(f for f in stack if f.kind is FrameKind.PYTHON)
    return py or stack
