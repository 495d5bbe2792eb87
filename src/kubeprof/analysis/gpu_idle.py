"""GPU idle ratio: the share of a time window in which a GPU ran no kernel.

Computed per device, per process (over the devices that process used) and per session (over
all devices used), for two windows: the session's (start to end of recording, which includes
start-up such as ``import torch``) and the active one (first kernel start to last kernel end),
which isolates stalls inside the workload such as a slow DataLoader.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from kubeprof.analysis.gpu_timeline import BUSY_KINDS, Interval, busy_by_device, clip, total
from kubeprof.model import GpuActivity


@dataclass(frozen=True, slots=True)
class IdleRatio:
    """Idle share of a window, over one or several devices."""

    busy_ns: int  # summed over devices
    window_ns: int  # window length times the number of devices
    devices: int = 1

    @property
    def idle_ratio(self) -> float:
        return 1.0 - self.busy_ns / self.window_ns if self.window_ns > 0 else 0.0


def _ratio(busy: dict[int, list[Interval]], start: int, end: int) -> IdleRatio:
    span = max(0, end - start)
    used = sum(total(clip(iv, start, end)) for iv in busy.values())
    return IdleRatio(used, span * len(busy), len(busy))


def by_device(
    activities: Sequence[GpuActivity], start: int, end: int, kinds: frozenset[str] = BUSY_KINDS
) -> dict[int, IdleRatio]:
    """Idle ratio of each device that ran anything, over [start, end)."""
    busy = busy_by_device(activities, kinds=kinds)
    return {dev: _ratio({dev: iv}, start, end) for dev, iv in busy.items()}


def by_process(
    activities: Sequence[GpuActivity], start: int, end: int, kinds: frozenset[str] = BUSY_KINDS
) -> dict[int, IdleRatio]:
    """Idle ratio of each process over [start, end) on the devices it used."""
    per_pid: dict[int, list[GpuActivity]] = defaultdict(list)
    for a in activities:
        if a.kind in kinds:
            per_pid[a.pid].append(a)
    return {
        pid: _ratio(busy_by_device(acts, kinds=kinds), start, end)
        for pid, acts in sorted(per_pid.items())
    }


def session(
    activities: Sequence[GpuActivity], start: int, end: int, kinds: frozenset[str] = BUSY_KINDS
) -> IdleRatio:
    """Idle ratio over all devices used in the session."""
    return _ratio(busy_by_device(activities, kinds=kinds), start, end)
