"""Where the launching thread was while the GPU waited on the host: computing, or blocked,
and whether an input pipeline was feeding it.

For each long host-wait stretch of the analysed window (nothing queued on the device), the
launching thread was either on CPU (its on-CPU samples say where) or off CPU. Off-CPU time
has a stack only where off-CPU samples were recorded (BPF ``sched_switch``, py-spy idle
sampling); without them it is "off CPU, no stack", and no code is named from the handful of
on-CPU samples that happen to land in a wait.

An input pipeline is recognised from what feeds the thread, not from a name guess alone:
PyTorch DataLoader frames in the thread's stacks during the stretches, or DataLoader worker
processes (``torch/utils/data/_utils/worker.py``) busy on CPU meanwhile; its worker function
is the user frame that dominates the workers' samples. A thread blocked with no pipeline
busy behind it is waiting for work (requests, the network, a sleep).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from kubeprof.analysis.cpu_samples import SampleColumns, ThreadSamples
from kubeprof.analysis.gpu_timeline import Interval, total
from kubeprof.analysis.gpu_trace import GpuTrace
from kubeprof.model import Frame, FrameKind, OffCpuSample, Stack

DATALOADER_FILES = ("torch/utils/data/",)  # the DataLoader and its fetchers
WORKER_FILES = ("torch/utils/data/_utils/worker.py",)  # a DataLoader worker's loop
LIBRARY_MARKERS = ("site-packages", "dist-packages", "/lib/python3", "<frozen")
BUSY_WORKERS = 0.5  # producers on CPU at least this many cores during the stretches
MIN_PIPELINE_SAMPLES = 3  # launcher samples in DataLoader frames that count as evidence


@dataclass(frozen=True, slots=True)
class Site:
    """A source line and how much of the evidence it carries."""

    frame: Frame
    count: int
    share: float

    def label(self) -> str:
        return f"{self.frame.name} ({self.frame.file.rsplit('/', 1)[-1]}:{self.frame.line})"

    def line(self) -> str:
        return f"{self.frame.file}:{self.frame.line} {self.frame.name}"


@dataclass(frozen=True, slots=True)
class Workers:
    """The input pipeline's producers during the stretches."""

    processes: int  # worker processes (or threads) seen
    cores: float  # their CPU during the stretches, in cores (samples x period / time)
    hot: Site | None  # the user function dominating their samples


@dataclass(frozen=True, slots=True)
class HostWaits:
    """The launching thread during the long host-wait stretches of the analysed window."""

    wait_ns: int  # length of the stretches
    stretches: int
    on_cpu_share: float | None  # of the stretches' time; None without CPU samples
    offcpu_source: str  # "" when no off-CPU samples cover the stretches
    offcpu_ns: int  # waits with a stack inside the stretches
    wait_site: Site | None  # user frame the thread waited in (off-CPU stacks only)
    wait_reason: str  # most common blocking reason of those waits
    pipeline: bool  # an input pipeline fed the thread
    pipeline_site: Site | None  # the user line that pulls from it (e.g. ``next(loader)``)
    workers: Workers | None
    resume_site: Site | None  # the user line that launched the work ending most stretches

    @property
    def blocked(self) -> bool:
        """The thread was off CPU most of the stretches (None-safe: unknown is not blocked)."""
        return self.on_cpu_share is not None and self.on_cpu_share < 0.5


def user_frame(stack: Stack) -> Frame | None:
    """Innermost Python frame outside installed libraries (the line a person edits)."""
    for f in reversed(stack):
        if f.kind is FrameKind.PYTHON and not any(m in f.file for m in LIBRARY_MARKERS):
            return f
    return None


def _caller_of(stack: Stack, files: tuple[str, ...]) -> Frame | None:
    """The user frame right above the first frame in ``files`` (who called into it)."""
    last_user = None
    for f in stack:
        if f.kind is not FrameKind.PYTHON:
            continue
        if any(m in f.file for m in files):
            return last_user
        if not any(m in f.file for m in LIBRARY_MARKERS):
            last_user = f
    return None


def _in(stack: Stack, files: tuple[str, ...]) -> bool:
    return any(f.kind is FrameKind.PYTHON and any(m in f.file for m in files) for f in stack)


def _site(counts: Counter[Frame]) -> Site | None:
    n = sum(counts.values())
    if not n:
        return None
    f, c = counts.most_common(1)[0]
    return Site(f, c, c / n)


def analyse(
    trace: GpuTrace,
    stretches: Sequence[Interval],
    cpu: SampleColumns | None,
    launcher: ThreadSamples | None,
    offcpu: Sequence[OffCpuSample] = (),
) -> HostWaits:
    """Classify the launcher's time in ``stretches`` (sorted, non-overlapping)."""
    wait = total(stretches)
    on_cpu = None
    pipe_calls: Counter[Frame] = Counter()
    pipe_samples = 0
    if cpu is not None and launcher is not None and wait:
        counts = launcher.counts_in(stretches)
        for sid, c in counts.items():
            st = cpu.stacks[sid]
            if _in(st, DATALOADER_FILES):
                pipe_samples += c
                if (f := _caller_of(st, DATALOADER_FILES)) is not None:
                    pipe_calls[f] += c
        n = sum(counts.values())
        on_cpu = min(1.0, n * cpu.period_ns / wait) if cpu.period_ns else None
    off_sites: Counter[Frame] = Counter()
    reasons: Counter[str] = Counter()
    off_ns = 0
    source = ""
    if launcher is not None:
        for o in _inside(offcpu, launcher, stretches):
            source = source or o.source
            off_ns += o.weight_ns
            reasons[o.reason or "unknown"] += o.weight_ns
            if _in(o.stack, DATALOADER_FILES):
                pipe_samples += MIN_PIPELINE_SAMPLES
                if (f := _caller_of(o.stack, DATALOADER_FILES)) is not None:
                    pipe_calls[f] += 1
            if (f := user_frame(o.stack)) is not None:
                off_sites[f] += o.weight_ns
    workers = _workers(cpu, launcher, stretches, wait)
    busy_workers = workers is not None and workers.cores >= BUSY_WORKERS
    pipeline = pipe_samples >= MIN_PIPELINE_SAMPLES or (busy_workers and pipe_samples > 0)
    return HostWaits(
        wait_ns=wait,
        stretches=len(stretches),
        on_cpu_share=on_cpu,
        offcpu_source=source,
        offcpu_ns=off_ns,
        wait_site=_site(off_sites),
        wait_reason=reasons.most_common(1)[0][0] if reasons else "",
        pipeline=pipeline,
        pipeline_site=_site(pipe_calls),
        workers=workers,
        resume_site=_resume_site(trace, stretches),
    )


def _inside(
    offcpu: Sequence[OffCpuSample], launcher: ThreadSamples, stretches: Sequence[Interval]
) -> list[OffCpuSample]:
    """The launcher's off-CPU samples whose wait overlaps a stretch."""
    if not offcpu or not stretches:
        return []
    starts = [s for s, _ in stretches]
    out = []
    for o in offcpu:
        if o.pid != launcher.pid or o.tid != launcher.tid:
            continue
        i = bisect_right(starts, o.ts_ns + max(0, o.blocked_ns)) - 1
        if i >= 0 and stretches[i][1] > o.ts_ns:
            out.append(o)
    return out


def _workers(
    cpu: SampleColumns | None,
    launcher: ThreadSamples | None,
    stretches: Sequence[Interval],
    wait: int,
) -> Workers | None:
    """DataLoader workers' CPU during the stretches and their dominant user function."""
    if cpu is None or launcher is None or not wait:
        return None
    hot: Counter[Frame] = Counter()
    pids: set[int] = set()
    n = 0
    worker: dict[int, tuple[bool, Frame | None]] = {}  # per stack id: (in a worker, user frame)
    for t in cpu.threads:
        # DataLoader workers are processes of their own: the launcher's threads are not
        if t.pid == launcher.pid or not _any_worker_stack(cpu, t, worker):
            continue
        mine = 0
        for sid, c in t.counts_in(stretches).items():
            if sid not in worker:
                st = cpu.stacks[sid]
                worker[sid] = (_in(st, WORKER_FILES), user_frame(st))
            is_worker, f = worker[sid]
            if not is_worker:
                continue
            mine += c
            if f is not None:
                hot[f] += c
        if mine:
            pids.add(t.pid)
            n += mine
    if not pids:
        return None
    return Workers(len(pids), n * cpu.period_ns / wait, _site(hot))


def _any_worker_stack(
    cpu: SampleColumns, t: ThreadSamples, cache: dict[int, tuple[bool, Frame | None]]
) -> bool:
    """Whether any of the thread's samples is in a DataLoader worker loop (distinct stacks)."""
    for sid in set(t.stack_ids):
        if sid not in cache:
            st = cpu.stacks[sid]
            cache[sid] = (_in(st, WORKER_FILES), user_frame(st))
        if cache[sid][0]:
            return True
    return False


def _resume_site(trace: GpuTrace, stretches: Sequence[Interval]) -> Site | None:
    """The user line whose launch ended the stretches (the first device work after each)."""
    counts: Counter[Frame] = Counter()
    starts = trace.work_starts
    for _, e in stretches:
        i = bisect_left(starts, e)
        if i < len(starts) and (f := user_frame(trace.work[i].stack)) is not None:
            counts[f] += 1
    return _site(counts)
