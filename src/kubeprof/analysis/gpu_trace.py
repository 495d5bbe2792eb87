"""One GPU trace model, built once: device work sorted by time, busy and idle intervals per
device.

Every analysis reads this instead of re-walking the activity list (HTA's habit: load the
trace once, ask it many questions). Built in a few passes over the activities, so a million
kernels take about a second in pure Python.

Busy means any engine: the device is busy while a kernel, a copy or a memset runs on it (a
loop whose GPU work is one copy a step keeps the device as busy as its copies last).
Kernel-busy and copy-busy are indexed apart, so a report shows them beside the headline.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from kubeprof.analysis.gpu_timeline import Interval, gaps
from kubeprof.model import GpuActivity

COPY_KINDS = frozenset({"memcpy", "memset"})
WORK_KINDS = frozenset({"kernel"}) | COPY_KINDS  # what keeps a device busy
# Sync records that mean "the host thread was blocked"; stream_wait_event is a GPU-side wait.
HOST_SYNCS = frozenset({"event_sync", "stream_sync", "context_sync"})


@dataclass(frozen=True, slots=True)
class BusyIndex:
    """Merged busy intervals per device, with running totals for two-bisection queries."""

    intervals: dict[int, list[Interval]]
    index: dict[int, tuple[list[int], list[int]]]  # interval starts, cumulative busy ns

    def ns(self, start: int, end: int) -> int:
        """Busy time in [start, end), summed over devices."""
        return sum(self.device_ns(dev, start, end) for dev in self.intervals)

    def device_ns(self, dev: int, start: int, end: int) -> int:
        """Busy time of one device in [start, end): two bisections and the running totals
        (the same as clipping every interval to the window and adding them up)."""
        iv = self.intervals[dev]
        i, j = self.slice(dev, start, end)
        if i >= j:
            return 0
        cum = self.index[dev][1]
        inner = cum[j] - cum[i]
        inner -= max(0, start - iv[i][0]) + max(0, iv[j - 1][1] - end)
        if i == j - 1 and inner < 0:
            inner = min(iv[i][1], end) - max(iv[i][0], start)
        return max(0, inner)

    def slice(self, dev: int, start: int, end: int) -> tuple[int, int]:
        """Index range of the device's busy intervals that overlap [start, end)."""
        starts = self.index[dev][0]
        i = max(0, bisect_right(starts, start) - 1)
        if i < len(starts) and self.intervals[dev][i][1] <= start:
            i += 1
        return i, bisect_left(starts, end)


def busy_index(work: Sequence[GpuActivity]) -> BusyIndex:
    """Index of the union of ``work`` (sorted by start) per device."""
    return index_busy(_merge_sorted(work))


def index_busy(busy: dict[int, list[Interval]]) -> BusyIndex:
    """Index of merged busy intervals per device (running totals for window questions)."""
    index = {}
    for dev, iv in busy.items():
        cum = [0]
        for s, e in iv:
            cum.append(cum[-1] + e - s)
        index[dev] = ([s for s, _ in iv], cum)
    return BusyIndex(busy, index)


@dataclass(frozen=True, slots=True)
class GpuTrace:
    """Device work and the other GPU records of a session, indexed for window questions."""

    kernels: tuple[GpuActivity, ...]  # sorted by start_ns
    starts: tuple[int, ...]  # kernels' start_ns, for bisection
    copies: tuple[GpuActivity, ...]  # memcpy/memset, sorted by start
    syncs: tuple[GpuActivity, ...]  # sync records, sorted by start
    pids: frozenset[int]  # processes that ran device work
    work: tuple[GpuActivity, ...]  # kernels, copies and memsets on a device, sorted by start
    work_starts: tuple[int, ...]
    any_busy: BusyIndex  # any engine: what the headline counts
    kernel_busy: BusyIndex  # kernels only (SMs busy)
    copy_busy: BusyIndex  # copies and memsets only (copy engines busy)
    markers: tuple[GpuActivity, ...] = ()  # NVTX / record_function ranges, sorted by start

    @property
    def busy(self) -> dict[int, list[Interval]]:
        """Merged any-engine busy intervals per device."""
        return self.any_busy.intervals

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(self.busy)

    def busy_ns(self, start: int, end: int) -> int:
        """Any-engine busy time in [start, end), summed over devices (two bisections each)."""
        return self.any_busy.ns(start, end)

    def idle(self, start: int, end: int) -> dict[int, list[Interval]]:
        """Idle intervals (no engine busy) of [start, end) per device."""
        out = {}
        for dev, iv in self.busy.items():
            i, j = self.any_busy.slice(dev, start, end)
            out[dev] = gaps(iv[i:j], start, end)
        return out


def build(activities: Sequence[GpuActivity]) -> GpuTrace:
    """Index a session's activities (any order, any kinds)."""
    kernels: list[GpuActivity] = []
    copies: list[GpuActivity] = []
    syncs: list[GpuActivity] = []
    markers: list[GpuActivity] = []
    for a in activities:
        if a.kind == "kernel":
            if a.device >= 0 and a.end_ns > a.start_ns:
                kernels.append(a)
        elif a.kind in COPY_KINDS:
            copies.append(a)
        elif a.kind == "sync":
            syncs.append(a)
        elif a.kind == "nvtx" and a.end_ns > a.start_ns:
            markers.append(a)
    by_start = attrgetter("start_ns")
    markers.sort(key=by_start)
    kernels.sort(key=by_start)
    copies.sort(key=by_start)
    syncs.sort(key=by_start)
    on_device = [c for c in copies if c.device >= 0 and c.end_ns > c.start_ns]
    kernel_busy = busy_index(kernels)
    if on_device:
        work = sorted((*kernels, *on_device), key=by_start)
        any_busy, copy_busy = busy_index(work), busy_index(on_device)
    else:  # kernels only: any-engine busy is kernel busy
        work, any_busy, copy_busy = kernels, kernel_busy, busy_index(())
    return GpuTrace(
        kernels=tuple(kernels),
        starts=tuple(k.start_ns for k in kernels),
        copies=tuple(copies),
        syncs=tuple(syncs),
        pids=frozenset(w.pid for w in work),
        work=tuple(work),
        work_starts=tuple(w.start_ns for w in work),
        any_busy=any_busy,
        kernel_busy=kernel_busy,
        copy_busy=copy_busy,
        markers=tuple(markers),
    )


def _merge_sorted(kernels: Sequence[GpuActivity]) -> dict[int, list[Interval]]:
    """Union of work intervals per device; input sorted by start, so one pass."""
    out: dict[int, list[Interval]] = defaultdict(list)
    last: dict[int, list[int]] = {}
    for k in kernels:
        cur = last.get(k.device)
        if cur is not None and k.start_ns <= cur[1]:
            if k.end_ns > cur[1]:
                cur[1] = k.end_ns
            continue
        if cur is not None:
            out[k.device].append((cur[0], cur[1]))
        last[k.device] = [k.start_ns, k.end_ns]
    for dev, cur in last.items():
        out[dev].append((cur[0], cur[1]))
    return {dev: out[dev] for dev in sorted(out)}


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """Intersection of two sorted, non-overlapping interval lists."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        s = max(a[i][0], b[j][0])
        e = min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] <= b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """Parts of sorted, non-overlapping ``a`` not covered by sorted, non-overlapping ``b``."""
    if not b:
        return list(a)
    out: list[Interval] = []
    j = 0
    for s, e in a:
        while j < len(b) and b[j][1] <= s:
            j += 1
        cur = s
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out
