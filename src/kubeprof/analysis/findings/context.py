"""What every finding reads: the trace index, phases, idle figures and parts, CPU-during-idle.

Built once per analysis (``analysis.findings.analyse``); each finding module is a pure
function ``find(ctx) -> Finding | None``.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from kubeprof.analysis.cpu_during_idle import CpuDuringIdle
from kubeprof.analysis.gpu_timeline import Interval
from kubeprof.analysis.gpu_trace import HOST_SYNCS, GpuTrace
from kubeprof.analysis.host_waits import HostWaits
from kubeprof.analysis.idle_breakdown import IdleBreakdown, IdleParts
from kubeprof.analysis.phases import Phases
from kubeprof.analysis.steady_idle import PhaseFigures
from kubeprof.model import Frame, FrameKind, GpuActivity, GpuMetricSample, Stack

LIBRARY_MARKERS = ("site-packages", "dist-packages", "/lib/python3", "<frozen")
LONG_GAP_NS = 1_000_000  # idle gaps from 1 ms: the host's own work, not launch or sync cost
ATTACH_NS = 20_000  # an idle gap starting this soon after a sync/DtoH copy follows from it


@dataclass(frozen=True)
class Context:
    trace: GpuTrace
    phases: Phases
    figures: PhaseFigures
    parts: dict[int, IdleParts]  # steady-state idle by category, per device
    breakdown: IdleBreakdown  # of the steady state
    cpu: CpuDuringIdle | None
    metrics: Sequence[GpuMetricSample]
    steady_gaps: dict[int, list[Interval]]  # idle gaps of the steady state per device
    waits: HostWaits | None = None  # the launcher during the long host waits (host_waits)

    @property
    def long_host_gaps(self) -> list[Interval]:
        """Idle stretches of LONG_GAP_NS or more with nothing queued (all devices)."""
        return [iv for p in self.parts.values() for iv in p.host if iv[1] - iv[0] >= LONG_GAP_NS]

    @cached_property
    def steady_kernels(self) -> tuple[GpuActivity, ...]:
        w = self.phases.steady
        i = bisect_left(self.trace.starts, w.start_ns)
        j = bisect_left(self.trace.starts, w.end_ns)
        return self.trace.kernels[i:j]

    @property
    def steady_ns(self) -> int:
        return self.phases.steady.duration_ns

    @property
    def steps(self) -> int:
        return self.phases.steps

    @cached_property
    def sync_gaps(self) -> dict[tuple[int, int, int], GpuActivity]:
        """Short idle gaps (device, start, end) that follow a host sync or a DtoH copy.

        After a sync the host has nothing queued ahead, so the GPU idles until it launches
        again; gaps of LONG_GAP_NS or more are the host's own work (starvation) instead.
        The value is the sync point, a copy preferred (it carries the launching stack).
        """
        points = [
            a
            for a in (*self.trace.syncs, *self.trace.copies)
            if self.in_steady(a)
            and (a.name in HOST_SYNCS or (a.kind == "memcpy" and "DtoH" in a.name))
        ]
        out: dict[tuple[int, int, int], GpuActivity] = {}
        for p in points:
            for dev in self.trace.devices if p.device < 0 else (p.device,):
                gaps = self.steady_gaps.get(dev, [])
                i = bisect_right(gaps, (p.end_ns + ATTACH_NS, 1 << 62)) - 1
                if i < 0:
                    continue
                s, e = gaps[i]
                if e <= p.end_ns or e - s >= LONG_GAP_NS:
                    continue
                key = (dev, s, e)
                if key not in out or out[key].kind == "sync":
                    out[key] = p
        return out

    def in_steady(self, a: GpuActivity) -> bool:
        w = self.phases.steady
        return w.start_ns <= a.start_ns < w.end_ns


def window_words(ctx: Context) -> str:
    """The analysed window with its length, for every finding's message: "the steady state
    (4.98 s, 209 steps)" or "the active window after warm-up (6.45 s, 194 bursts of GPU work)",
    so a share is never read without the time it is a share of."""
    ph = ctx.phases
    secs = f"{ph.steady.duration_ns / 1e9:.2f} s"
    if ph.loop:
        return f"the steady state ({secs}, {ph.steps} steps)"
    return f"the active window after warm-up ({secs}, {ph.steps} bursts of GPU work)"


def user_frame(stack: Stack) -> Frame | None:
    """Innermost Python frame outside installed libraries (the line a person edits)."""
    py = [f for f in stack if f.kind is FrameKind.PYTHON]
    for f in reversed(py):
        if not any(m in f.file for m in LIBRARY_MARKERS):
            return f
    return py[-1] if py else None


def median(values: Sequence[float]) -> float:
    s = sorted(values)
    return float(s[len(s) // 2]) if s else 0.0


def pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def ms(ns: float) -> str:
    return f"{ns / 1e6:.3g} ms"


def us(ns: float) -> str:
    return f"{ns / 1e3:.3g} µs"
