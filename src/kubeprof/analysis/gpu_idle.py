"""GPU idle ratio: the share of a time window in which a GPU ran nothing (no kernel, copy or
memset: busy means any engine).

Computed per device, per process (over the devices that process used) and per session (over
all devices used), over any window.

``headline`` is THE GPU idle figure kubeprof shows (`kubeprof report`, the operator's
`.status` and `/metrics`): ``steady_idle.figure`` (the one definition the findings analysis
uses too) over ``window``, the steady state of the workload's main loop or, without a loop,
the active window after warm-up (``phases.detect``); only where no device work was traced,
NVML's device-wide utilisation stands in, labelled ``source="nvml"``. Every figure here is a
``steady_idle.IdleFigure``, the one type the report, JSON and the operator's status read.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kubeprof.analysis import gpu_trace, phases, steady_idle
from kubeprof.analysis.gpu_columns import PID, of_kinds
from kubeprof.analysis.gpu_timeline import (
    BUSY_KINDS,
    Interval,
    busy_by_device,
)
from kubeprof.analysis.steady_idle import CUPTI, NVML, IdleFigure
from kubeprof.model import GpuActivity, GpuMetricSample

UTIL_METRIC = "gpu_util_pct"  # NVML: percent of the sample period in which a kernel ran
__all__ = ["CUPTI", "NVML", "UTIL_METRIC", "IdleFigure", "IdleRatio"]


@dataclass(frozen=True, slots=True)
class IdleRatio:
    """Idle share of a window, over one or several devices."""

    busy_ns: int  # summed over devices
    window_ns: int  # window length times the number of devices
    devices: int = 1

    @property
    def idle_ratio(self) -> float:
        return 1.0 - self.busy_ns / self.window_ns if self.window_ns > 0 else 0.0


def ratio_in(busy: gpu_trace.BusyIndex, start: int, end: int) -> IdleRatio:
    """Idle ratio over [start, end) of all the devices in an index (bisections only)."""
    span = max(0, end - start)
    n = len(busy.intervals)
    return IdleRatio(busy.ns(start, end), span * n, n)


def device_ratios(busy: gpu_trace.BusyIndex, start: int, end: int) -> dict[int, IdleRatio]:
    """Idle ratio over [start, end) of each device in an index."""
    span = max(0, end - start)
    return {dev: IdleRatio(busy.device_ns(dev, start, end), span, 1) for dev in busy.intervals}


def busy_by_process(
    activities: Sequence[GpuActivity],
    kinds: frozenset[str] = BUSY_KINDS,
    *,
    every: gpu_trace.BusyIndex | None = None,
) -> dict[int, gpu_trace.BusyIndex]:
    """Busy intervals of each process that ran any of ``kinds``, indexed (one pass each).

    ``every``: the index of all of them together, when the caller has it: a session of one
    process (the usual one) is that index."""
    work = of_kinds(activities, kinds)
    pids = set(map(PID, work))
    if every is not None and len(pids) == 1:
        return {pids.pop(): every}
    per_pid: dict[int, list[GpuActivity]] = defaultdict(list)
    for a in work:
        per_pid[a.pid].append(a)
    return {
        pid: gpu_trace.index_busy(busy_by_device(acts, kinds=kinds))
        for pid, acts in sorted(per_pid.items())
    }


def by_device(
    activities: Sequence[GpuActivity], start: int, end: int, kinds: frozenset[str] = BUSY_KINDS
) -> dict[int, IdleRatio]:
    """Idle ratio of each device that ran anything, over [start, end)."""
    return device_ratios(gpu_trace.index_busy(busy_by_device(activities, kinds=kinds)), start, end)


def by_process(
    activities: Sequence[GpuActivity], start: int, end: int, kinds: frozenset[str] = BUSY_KINDS
) -> dict[int, IdleRatio]:
    """Idle ratio of each process over [start, end) on the devices it used."""
    return {
        pid: ratio_in(busy, start, end) for pid, busy in busy_by_process(activities, kinds).items()
    }


def session(
    activities: Sequence[GpuActivity], start: int, end: int, kinds: frozenset[str] = BUSY_KINDS
) -> IdleRatio:
    """Idle ratio over all devices used in the session."""
    return ratio_in(gpu_trace.index_busy(busy_by_device(activities, kinds=kinds)), start, end)


def window(activities: Sequence[GpuActivity]) -> Interval:
    """The window the headline is measured over (``phases.detect``'s analysed window): whole
    steps of the main loop, or the active window after warm-up where there is no loop.
    (0, 0) without device work."""
    trace = gpu_trace.build(activities)
    w = _analysed(trace)
    return (w.start_ns, w.end_ns) if w is not None else (0, 0)


def _analysed(trace: gpu_trace.GpuTrace) -> phases.Window | None:
    if not trace.work:
        return None
    first = trace.work_starts[0]
    last = max(iv[-1][1] for iv in trace.busy.values())
    steady = phases.detect(trace, phases.Window(first, last)).steady
    return steady if steady.duration_ns > 0 else phases.Window(first, last)


def headline(
    activities: Sequence[GpuActivity], metrics: Sequence[GpuMetricSample] = ()
) -> IdleFigure | None:
    """GPU idle of one clock domain (a local session, or one node), all devices together.

    CUPTI first: ``steady_idle.figure`` over the analysed window, on the devices that ran
    work. Without any device work, the mean of NVML's device-wide utilisation samples. None
    when neither exists.
    """
    trace = gpu_trace.build(activities)
    w = _analysed(trace)
    if w is not None and (fig := steady_idle.figure(trace, w)).ratio is not None:
        return fig
    util = nvml_util(metrics)
    if not util:
        return None
    figures = [_nvml_figure(v) for v in util.values()]
    return combine(figures)


def per_device(
    activities: Sequence[GpuActivity], metrics: Sequence[GpuMetricSample] = ()
) -> dict[int, IdleFigure]:
    """The headline definition per device; devices that ran no kernel fall back to NVML."""
    start, end = window(activities)
    out: dict[int, IdleFigure] = {}
    if end > start:
        for dev, r in by_device(activities, start, end).items():
            out[dev] = _cupti_figure(r, start, end)
    for dev, samples in nvml_util(metrics).items():
        if dev not in out:
            out[dev] = _nvml_figure(samples)
    return dict(sorted(out.items()))


def combine(figures: Iterable[IdleFigure]) -> IdleFigure | None:
    """Device-weighted mean of figures from separate clock domains (e.g. several nodes);
    figures without a ratio are left out."""
    figs = [f for f in figures if f.ratio is not None]
    if len(figs) <= 1:
        return figs[0] if figs else None
    devices = sum(f.devices for f in figs)
    ratio = sum((f.ratio or 0.0) * f.devices for f in figs) / devices
    source = "+".join(sorted({s for f in figs for s in f.source.split("+")}))
    span = phases.Window(min(f.window.start_ns for f in figs), max(f.window.end_ns for f in figs))
    return steady_idle.of_ratio(ratio, source, span, devices)


def nvml_util(metrics: Iterable[GpuMetricSample]) -> dict[int, list[GpuMetricSample]]:
    """Device-wide NVML utilisation samples per device (per-process rows are not used)."""
    out: dict[int, list[GpuMetricSample]] = defaultdict(list)
    for m in metrics:
        if m.metric == UTIL_METRIC and m.pid == 0:
            out[m.device].append(m)
    return dict(sorted(out.items()))


def _nvml_figure(samples: Sequence[GpuMetricSample]) -> IdleFigure:
    mean = sum(m.value for m in samples) / len(samples)
    span = phases.Window(min(m.ts_ns for m in samples), max(m.ts_ns for m in samples))
    return steady_idle.of_ratio(min(1.0, max(0.0, 1 - mean / 100)), NVML, span)


def _cupti_figure(r: IdleRatio, start: int, end: int) -> IdleFigure:
    """One device's traced figure over [start, end) (no kernel/copy split)."""
    return IdleFigure(phases.Window(start, end), r.busy_ns, r.devices, r.idle_ratio)


def recent(
    activities: Sequence[GpuActivity],
    metrics: Sequence[GpuMetricSample],
    window_ns: int,
    now_ns: int,
) -> dict[int, IdleFigure]:
    """Per device, idle over the last ``window_ns`` up to ``now_ns``: "idle now".

    The rolling figure an alert reads. Same definition as ``headline`` (kernel spans first,
    NVML device utilisation for a device that ran no kernel in the window), over a window
    that moves with the session instead of its steady state. A device with neither has no
    figure (never 0 % or 100 %).
    """
    start = now_ns - window_ns
    inside = [a for a in activities if a.end_ns > start and a.start_ns < now_ns]
    out = {
        dev: _cupti_figure(r, start, now_ns) for dev, r in by_device(inside, start, now_ns).items()
    }
    for dev, samples in nvml_util(m for m in metrics if start <= m.ts_ns <= now_ns).items():
        out.setdefault(dev, _nvml_figure(samples))
    return dict(sorted(out.items()))
