"""What every finding reads: the trace index, phases, idle figures and parts, CPU-during-idle.

Built once per analysis (``analysis.findings.analyse``); each finding module is a pure
function ``find(ctx) -> Finding | None``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from kubeprof.analysis.cpu_during_idle import CpuDuringIdle
from kubeprof.analysis.gpu_trace import GpuTrace
from kubeprof.analysis.idle_breakdown import IdleBreakdown, IdleParts
from kubeprof.analysis.phases import Phases
from kubeprof.analysis.steady_idle import PhaseFigures
from kubeprof.model import Frame, FrameKind, GpuActivity, GpuMetricSample, Stack

LIBRARY_MARKERS = ("site-packages", "dist-packages", "/lib/python3", "<frozen")


@dataclass(frozen=True)
class Context:
    trace: GpuTrace
    phases: Phases
    figures: PhaseFigures
    parts: dict[int, IdleParts]  # steady-state idle by category, per device
    breakdown: IdleBreakdown  # of the steady state
    cpu: CpuDuringIdle | None
    metrics: Sequence[GpuMetricSample]

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

    def in_steady(self, a: GpuActivity) -> bool:
        w = self.phases.steady
        return w.start_ns <= a.start_ns < w.end_ns


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
