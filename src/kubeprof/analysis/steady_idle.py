"""The honest GPU idle figure: idle over the steady state, each phase shown apart, and a
100 ms timeline that backs every figure.

Idle means no engine of a device was busy: no kernel, copy or memset ran on it (a copy-bound
loop is busy, not idle; kernel-busy and copy-busy are given beside it). Over several devices
it is busy time summed over devices against the window times the devices.
A figure without data behind it is ``None`` with the reason, never 0 % or 100 %.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubeprof.analysis.gpu_timeline import Interval
from kubeprof.analysis.gpu_trace import GpuTrace
from kubeprof.analysis.phases import Phases, Window

BUCKET_NS = 100_000_000  # timeline resolution: 100 ms
MAX_BUCKETS = 4_096  # a longer window gets wider buckets, so memory never follows the span
CUPTI = "cupti"  # measured from traced kernel/copy/memset spans
NVML = "nvml"  # NVML utilisation stands in where no device work was traced


@dataclass(frozen=True, slots=True)
class IdleFigure:
    """Idle share of one window: THE GPU idle type of the analysis, the report, JSON and the
    operator's status (``gpu_idle`` builds its headline, per-device, rolling and NVML figures
    as this type too). ``ratio`` is None when no data backs it (see ``reason``)."""

    window: Window
    busy_ns: int  # any-engine busy time, summed over devices
    devices: int
    ratio: float | None  # 0..1
    reason: str = ""  # why ratio is None
    # of which a kernel ran (SMs busy) / a copy or memset ran (copy engines; overlaps kernel
    # time); None where the figure has no engine split (NVML, a mean of nodes, per device)
    kernel_busy_ns: int | None = None
    copy_busy_ns: int | None = None
    source: str = CUPTI  # "cupti", "nvml", or "cupti+nvml" for a mean over both

    @property
    def idle_ns(self) -> int:
        return self.window.duration_ns * self.devices - self.busy_ns

    @property
    def capacity_ns(self) -> int:
        return self.window.duration_ns * self.devices

    @property
    def kernel_busy(self) -> float | None:
        """Share of the window a kernel ran (None without a figure or an engine split)."""
        if self.ratio is None or self.kernel_busy_ns is None or not self.capacity_ns:
            return None
        return self.kernel_busy_ns / self.capacity_ns

    @property
    def copy_busy(self) -> float | None:
        """Share of the window a copy or memset ran (None without a figure or an engine split)."""
        if self.ratio is None or self.copy_busy_ns is None or not self.capacity_ns:
            return None
        return self.copy_busy_ns / self.capacity_ns


@dataclass(frozen=True, slots=True)
class PhaseFigures:
    """Idle of every phase; ``steady`` is the headline."""

    startup: IdleFigure
    warmup: IdleFigure
    steady: IdleFigure
    tail: IdleFigure
    session: IdleFigure


@dataclass(frozen=True, slots=True)
class Timeline:
    """Kernel-busy time per fixed-width bucket from ``start_ns``, summed over devices."""

    start_ns: int
    bucket_ns: int
    devices: int
    busy_ns: tuple[int, ...]

    def idle_ratio(self, i: int) -> float | None:
        """Idle share of bucket ``i`` (None without devices)."""
        if not self.devices:
            return None
        return 1.0 - self.busy_ns[i] / (self.bucket_ns * self.devices)


def no_data(window: Window, reason: str) -> IdleFigure:
    return IdleFigure(window, 0, 0, None, reason, 0, 0)


def of_ratio(ratio: float, source: str, window: Window, devices: int = 1) -> IdleFigure:
    """A figure known as a ratio only (NVML utilisation, a device-weighted mean of nodes, one
    device's share): busy is what the ratio implies, with no kernel/copy split."""
    busy = round((1.0 - ratio) * window.duration_ns * devices)
    return IdleFigure(window, busy, devices, ratio, source=source)


NO_WORK = "the GPU tracer recorded no kernels, copies or memsets"


def figure(trace: GpuTrace, window: Window, *, empty_reason: str = "") -> IdleFigure:
    """Idle of ``window`` over the devices that ran work in the session: THE definition the
    report, the operator's status, the metric and the light agent's fixture check share."""
    devices = len(trace.busy)
    if not devices:
        return no_data(window, NO_WORK)
    if window.duration_ns <= 0:
        return IdleFigure(window, 0, devices, None, empty_reason or "empty window", 0, 0)
    a, b = window.start_ns, window.end_ns
    busy = trace.busy_ns(a, b)
    return IdleFigure(
        window,
        busy,
        devices,
        1.0 - busy / (window.duration_ns * devices),
        kernel_busy_ns=trace.kernel_busy.ns(a, b),
        copy_busy_ns=trace.copy_busy.ns(a, b),
    )


def phase_figures(trace: GpuTrace, phases: Phases) -> PhaseFigures:
    return PhaseFigures(
        startup=figure(trace, phases.startup, empty_reason="no start-up before the first GPU work"),
        warmup=figure(
            trace, phases.warmup, empty_reason="no warm-up: steady from the first kernel"
        ),
        steady=figure(trace, phases.steady, empty_reason="no steady state found"),
        tail=figure(trace, phases.tail, empty_reason="no tail after the steady state"),
        session=figure(trace, phases.session),
    )


def bucket_width(duration_ns: int, bucket_ns: int = BUCKET_NS) -> int:
    """``bucket_ns``, or a whole multiple of it wide enough that ``duration_ns`` fits in
    ``MAX_BUCKETS``: a claimed span of years must not allocate a slot per 100 ms."""
    if duration_ns <= bucket_ns * MAX_BUCKETS:
        return bucket_ns
    per = -(-duration_ns // MAX_BUCKETS)
    return -(-per // bucket_ns) * bucket_ns


def timeline(trace: GpuTrace, window: Window, bucket_ns: int = BUCKET_NS) -> Timeline:
    """Any-engine busy ns per bucket over ``window`` (at most ``MAX_BUCKETS`` buckets, widened
    for long windows); the last bucket may be partly outside it."""
    bucket_ns = bucket_width(window.duration_ns, bucket_ns)
    n = max(0, -(-window.duration_ns // bucket_ns))
    out = [0] * n
    for iv in trace.busy.values():
        _add(out, iv, window.start_ns, bucket_ns, window.end_ns)
    return Timeline(window.start_ns, bucket_ns, len(trace.busy), tuple(out))


def _add(out: list[int], busy: list[Interval], start: int, width: int, end: int) -> None:
    for s, e in busy:
        s, e = max(s, start), min(e, end)
        while s < e:
            i = (s - start) // width
            edge = min(e, start + (i + 1) * width)
            out[i] += edge - s
            s = edge
