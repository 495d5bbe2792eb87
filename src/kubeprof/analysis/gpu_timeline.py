"""GPU busy/idle timeline per device, from the intervals of the work that ran on it.

"Busy" means any engine (by default): a kernel, a copy or a memset was running on the device
(``gpu_trace`` says why); overlapping work (concurrent streams) counts once, so busy time never
exceeds wall time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from kubeprof.model import GpuActivity

Interval = tuple[int, int]  # [start_ns, end_ns)
BUSY_KINDS = frozenset({"kernel", "memcpy", "memset"})  # any engine: kernels, copies, memsets


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, non-overlapping union of intervals (touching ones are joined)."""
    out: list[Interval] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def clip(intervals: Iterable[Interval], start: int, end: int) -> list[Interval]:
    """Intervals cut to [start, end) (input merged and sorted)."""
    return [(max(s, start), min(e, end)) for s, e in intervals if e > start and s < end]


def total(intervals: Iterable[Interval]) -> int:
    """Summed length of (non-overlapping) intervals."""
    return sum(e - s for s, e in intervals)


def gaps(busy: list[Interval], start: int, end: int) -> list[Interval]:
    """Idle intervals of [start, end) given merged busy intervals."""
    out = []
    cursor = start
    for s, e in clip(busy, start, end):
        if s > cursor:
            out.append((cursor, s))
        cursor = max(cursor, e)
    if cursor < end:
        out.append((cursor, end))
    return out


def busy_by_device(
    activities: Iterable[GpuActivity],
    *,
    kinds: frozenset[str] = BUSY_KINDS,
    pid: int | None = None,
) -> dict[int, list[Interval]]:
    """Merged busy intervals per device (optionally of one process only)."""
    raw: dict[int, list[Interval]] = defaultdict(list)
    for a in activities:
        if a.kind in kinds and a.device >= 0 and (pid is None or a.pid == pid):
            raw[a.device].append((a.start_ns, a.end_ns))
    return {dev: merge(iv) for dev, iv in sorted(raw.items())}


def active_window(
    activities: Iterable[GpuActivity], kinds: frozenset[str] = BUSY_KINDS
) -> Interval:
    """From the first start to the last end of the given kinds; (0, 0) when there is none."""
    first = last = None
    for a in activities:
        if a.kind in kinds:
            first = a.start_ns if first is None else min(first, a.start_ns)
            last = a.end_ns if last is None else max(last, a.end_ns)
    return (first, last) if first is not None and last is not None else (0, 0)


def buckets(busy: list[Interval], start: int, end: int, n: int) -> tuple[float, ...]:
    """Busy fraction of each of ``n`` equal slices of [start, end) (for timeline strips)."""
    if n <= 0 or end <= start:
        return ()
    width = (end - start) / n
    out = [0.0] * n
    for s, e in clip(busy, start, end):
        i = int((s - start) // width)
        pos: float = s
        while i < n and pos < e:
            seg_end = min(float(e), start + (i + 1) * width)
            out[i] += seg_end - pos
            pos = seg_end
            i += 1
    return tuple(min(1.0, v / width) for v in out)
