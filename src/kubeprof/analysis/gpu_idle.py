"""GPU idle ratio: the share of a time window in which a GPU ran no kernel.

Computed per device, per process (over the devices that process used) and per session (over
all devices used), over any window.

``headline`` is THE GPU idle figure kubeprof shows (`kubeprof report`, the operator's
`.status` and `/metrics`): measured from CUPTI kernel spans over ``window``, the steady
state of the workload's main loop (start-up and warm-up are shown apart by
``kubeprof.analysis.findings.analyse``, which detects them with the same function); only where no
kernel was traced, NVML's device-wide utilisation stands in, labelled ``source="nvml"``.
Change the definition here and every consumer follows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kubeprof.analysis import gpu_trace, phases
from kubeprof.analysis.gpu_timeline import (
    BUSY_KINDS,
    Interval,
    active_window,
    busy_by_device,
    clip,
    total,
)
from kubeprof.model import GpuActivity, GpuMetricSample

UTIL_METRIC = "gpu_util_pct"  # NVML: percent of the sample period in which a kernel ran
CUPTI = "cupti"
NVML = "nvml"


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


@dataclass(frozen=True, slots=True)
class IdleFigure:
    """The headline GPU idle ratio, with where it comes from and the window it covers."""

    ratio: float  # 0..1, averaged over `devices`
    source: str  # "cupti" (kernel spans) or "nvml" (utilisation fallback); "cupti+nvml" mixed
    window: Interval  # [start_ns, end_ns) in the clock of the records it was measured on
    devices: int = 1


def window(activities: Sequence[GpuActivity]) -> Interval:
    """The window the headline is measured over: the steady state of the main loop.

    Found by ``phases.detect`` (whole steps of the recurring loop, after start-up, imports,
    allocation and warm-up/compilation); where no kernel recurs at a steady period, the
    active window (first kernel start to last kernel end). (0, 0) without kernels.
    """
    first, last = active_window(activities)
    if last <= first:
        return (0, 0)
    steady = phases.detect(gpu_trace.build(activities), phases.Window(first, last)).steady
    if steady.duration_ns <= 0:
        return (first, last)
    return (steady.start_ns, steady.end_ns)


def headline(
    activities: Sequence[GpuActivity], metrics: Sequence[GpuMetricSample] = ()
) -> IdleFigure | None:
    """GPU idle of one clock domain (a local session, or one node), all devices together.

    CUPTI first: the devices that ran kernels, over ``window``. Without any kernel, the mean
    of NVML's device-wide utilisation samples. None when neither exists.
    """
    start, end = window(activities)
    if end > start:
        r = session(activities, start, end)
        return IdleFigure(r.idle_ratio, CUPTI, (start, end), r.devices)
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
            out[dev] = IdleFigure(r.idle_ratio, CUPTI, (start, end), 1)
    for dev, samples in nvml_util(metrics).items():
        if dev not in out:
            out[dev] = _nvml_figure(samples)
    return dict(sorted(out.items()))


def combine(figures: Iterable[IdleFigure]) -> IdleFigure | None:
    """Device-weighted mean of figures from separate clock domains (e.g. several nodes)."""
    figs = list(figures)
    if len(figs) <= 1:
        return figs[0] if figs else None
    devices = sum(f.devices for f in figs)
    ratio = sum(f.ratio * f.devices for f in figs) / devices
    source = "+".join(sorted({s for f in figs for s in f.source.split("+")}))
    span = (min(f.window[0] for f in figs), max(f.window[1] for f in figs))
    return IdleFigure(ratio, source, span, devices)


def nvml_util(metrics: Iterable[GpuMetricSample]) -> dict[int, list[GpuMetricSample]]:
    """Device-wide NVML utilisation samples per device (per-process rows are not used)."""
    out: dict[int, list[GpuMetricSample]] = defaultdict(list)
    for m in metrics:
        if m.metric == UTIL_METRIC and m.pid == 0:
            out[m.device].append(m)
    return dict(sorted(out.items()))


def _nvml_figure(samples: Sequence[GpuMetricSample]) -> IdleFigure:
    mean = sum(m.value for m in samples) / len(samples)
    span = (min(m.ts_ns for m in samples), max(m.ts_ns for m in samples))
    return IdleFigure(min(1.0, max(0.0, 1 - mean / 100)), NVML, span, 1)


def recent(activities: Sequence[GpuActivity], metrics: Sequence[GpuMetricSample],
           window_ns: int, now_ns: int) -> dict[int, IdleFigure]:
    """Per device, idle over the last ``window_ns`` up to ``now_ns``: "idle now".

    The rolling figure an alert reads. Same definition as ``headline`` (kernel spans first,
    NVML device utilisation for a device that ran no kernel in the window), over a window
    that moves with the session instead of its steady state. A device with neither has no
    figure (never 0 % or 100 %).
    """
    start = now_ns - window_ns
    inside = [a for a in activities if a.end_ns > start and a.start_ns < now_ns]
    out = {dev: IdleFigure(r.idle_ratio, CUPTI, (start, now_ns), 1)
           for dev, r in by_device(inside, start, now_ns).items()}
    for dev, samples in nvml_util(m for m in metrics if start <= m.ts_ns <= now_ns).items():
        out.setdefault(dev, _nvml_figure(samples))
    return dict(sorted(out.items()))
