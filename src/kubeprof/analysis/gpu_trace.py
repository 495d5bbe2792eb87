"""One GPU trace model, built once: kernels sorted by time, busy and idle intervals per device.

Every analysis of the findings layer reads this instead of re-walking the activity list
(HTA's habit: load the trace once, ask it many questions). Built in a few passes over the
activities, so a million kernels take about a second in pure Python.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from kubeprof.analysis.gpu_timeline import Interval, clip, gaps, total
from kubeprof.model import GpuActivity

COPY_KINDS = frozenset({"memcpy", "memset"})
# Sync records that mean "the host thread was blocked"; stream_wait_event is a GPU-side wait.
HOST_SYNCS = frozenset({"event_sync", "stream_sync", "context_sync"})


@dataclass(frozen=True, slots=True)
class GpuTrace:
    """Kernels and the other GPU records of a session, indexed for window questions."""

    kernels: tuple[GpuActivity, ...]  # sorted by start_ns
    starts: tuple[int, ...]  # kernels' start_ns, for bisection
    busy: dict[int, list[Interval]]  # merged kernel intervals per device
    copies: tuple[GpuActivity, ...]  # memcpy/memset, sorted by start
    syncs: tuple[GpuActivity, ...]  # sync records, sorted by start
    pids: frozenset[int]  # processes that ran kernels

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(self.busy)

    def busy_ns(self, start: int, end: int) -> int:
        """Kernel-busy time in [start, end), summed over devices."""
        return sum(total(clip(iv, start, end)) for iv in self.busy.values())

    def idle(self, start: int, end: int) -> dict[int, list[Interval]]:
        """Idle intervals of [start, end) per device."""
        return {dev: gaps(iv, start, end) for dev, iv in self.busy.items()}


def build(activities: Sequence[GpuActivity]) -> GpuTrace:
    """Index a session's activities (any order, any kinds)."""
    kernels: list[GpuActivity] = []
    copies: list[GpuActivity] = []
    syncs: list[GpuActivity] = []
    for a in activities:
        if a.kind == "kernel":
            if a.device >= 0 and a.end_ns > a.start_ns:
                kernels.append(a)
        elif a.kind in COPY_KINDS:
            copies.append(a)
        elif a.kind == "sync":
            syncs.append(a)
    by_start = attrgetter("start_ns")
    kernels.sort(key=by_start)
    copies.sort(key=by_start)
    syncs.sort(key=by_start)
    return GpuTrace(
        kernels=tuple(kernels),
        starts=tuple(k.start_ns for k in kernels),
        busy=_merge_sorted(kernels),
        copies=tuple(copies),
        syncs=tuple(syncs),
        pids=frozenset(k.pid for k in kernels),
    )


def _merge_sorted(kernels: Sequence[GpuActivity]) -> dict[int, list[Interval]]:
    """Union of kernel intervals per device; input sorted by start, so one pass."""
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
