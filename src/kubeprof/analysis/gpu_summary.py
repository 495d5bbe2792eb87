"""The GPU part of a report: idle ratios, top kernels, attribution, NVML summaries.

``gpu_summary`` gathers numbers from stored records; ``gpu_profile_stacks`` gives the GPU
flame-graph stacks for ``Profile.gpu``. Rendering lives in ``kubeprof.report.gpu``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kubeprof.analysis import gpu_idle
from kubeprof.analysis.gpu_attribution import attribution, gpu_stacks
from kubeprof.analysis.gpu_columns import BYTES, by_kind, total_ns
from kubeprof.analysis.gpu_idle import IdleFigure, IdleRatio
from kubeprof.analysis.gpu_timeline import buckets, busy_by_device
from kubeprof.analysis.gpu_trace import GpuTrace, index_busy
from kubeprof.analysis.top_kernels import KernelStat, top_kernels
from kubeprof.model import GpuActivity, GpuMetricSample, WeightedStack

TIMELINE_BUCKETS = 120


@dataclass(frozen=True, slots=True)
class MetricSummary:
    """One NVML/GPM/PM metric of one device (or process) over the session."""

    device: int
    metric: str
    pid: int
    mean: float
    max: float
    samples: int


@dataclass(frozen=True, slots=True)
class GpuSummary:
    """Everything the GPU section of a report shows."""

    session_start_ns: int
    session_end_ns: int
    active_start_ns: int  # the headline window (gpu_idle.window), or 0 without device work
    active_end_ns: int
    session: IdleRatio  # all devices, session window
    headline: IdleFigure | None  # THE GPU idle figure (gpu_idle.headline), None without data
    devices: dict[int, IdleRatio]  # per device, session window
    devices_active: dict[int, IdleRatio]
    processes: dict[int, IdleRatio]  # per pid, session window
    processes_active: dict[int, IdleRatio]
    top_kernels: tuple[KernelStat, ...]
    kernels: int
    kernel_ns: int
    attributed_ns: int  # kernel time with a Python launch stack
    attributed_share: float
    attributed_via_main_ns: int  # part of attributed_ns taken from the main thread's stack
    memcpy_ns: int
    memcpy_bytes: int
    memset_ns: int
    sync_ns: int  # host time spent waiting in CUDA synchronization calls
    nvtx_ranges: int
    timeline: dict[int, tuple[float, ...]] = field(default_factory=dict)  # busy per bucket
    metrics: tuple[MetricSummary, ...] = ()
    counters: dict[str, int] = field(default_factory=dict)
    attributed_via_backward_ns: int = 0  # backward kernels charged to their forward op's line
    attributed_via_xla_ns: int = 0  # XLA kernels charged to their HLO op's Python line
    # not attributed: backward kernels of autograd nodes whose forward op launched no kernel
    unattributed_no_forward_ns: int = 0


def gpu_summary(
    activities: Sequence[GpuActivity],
    metrics: Sequence[GpuMetricSample],
    session_start_ns: int,
    session_end_ns: int,
    *,
    top: int = 15,
    counters: Mapping[str, int] | None = None,
    headline: IdleFigure | None = None,
    trace: GpuTrace | None = None,
) -> GpuSummary:
    """Summarise a session's GPU records over [session_start_ns, session_end_ns).

    ``headline``: the findings analysis' figure (``Analysis.headline``) when the caller
    has analysed the session already, so the trace is not indexed and phased again;
    ``trace``: that analysis' trace of the same records (its busy intervals are these)."""
    s0, s1 = session_start_ns, session_end_ns
    if headline is None:
        headline = gpu_idle.headline(activities, metrics)
    traced = headline is not None and headline.source == gpu_idle.CUPTI
    a0, a1 = (
        (headline.window.start_ns, headline.window.end_ns)
        if headline is not None and traced
        else (0, 0)
    )
    kinds = by_kind(activities)
    kernels = kinds.get("kernel", [])
    att = attribution(kernels)
    # the trace's any-engine busy intervals are busy_by_device's (the same union)
    busy = trace.busy if trace is not None else busy_by_device(activities)
    # one merge and index, asked about both windows
    whole = trace.any_busy if trace is not None else index_busy(busy)
    work = [*kernels, *kinds.get("memcpy", ()), *kinds.get("memset", ())]
    per_pid = gpu_idle.busy_by_process(work, every=whole)
    tl_end = max(s1, a1)
    return GpuSummary(
        session_start_ns=s0,
        session_end_ns=s1,
        active_start_ns=a0,
        active_end_ns=a1,
        session=gpu_idle.ratio_in(whole, s0, s1),
        headline=headline,
        devices=gpu_idle.device_ratios(whole, s0, s1),
        devices_active=gpu_idle.device_ratios(whole, a0, a1),
        processes={pid: gpu_idle.ratio_in(b, s0, s1) for pid, b in per_pid.items()},
        processes_active={pid: gpu_idle.ratio_in(b, a0, a1) for pid, b in per_pid.items()},
        top_kernels=tuple(top_kernels(kernels, top)),
        kernels=att.count,
        kernel_ns=att.total_ns,
        attributed_ns=att.attributed_ns,
        attributed_share=att.share,
        attributed_via_main_ns=att.via_main_ns,
        memcpy_ns=total_ns(kinds.get("memcpy", ())),
        memcpy_bytes=sum(map(BYTES, kinds.get("memcpy", ()))),
        memset_ns=total_ns(kinds.get("memset", ())),
        sync_ns=total_ns(kinds.get("sync", ())),
        nvtx_ranges=len(kinds.get("nvtx", ())),
        timeline={
            d: buckets(iv, min(s0, a0 or s0), tl_end, TIMELINE_BUCKETS) for d, iv in busy.items()
        },
        metrics=summarise_metrics(metrics),
        counters=dict(counters or {}),
        attributed_via_backward_ns=att.via_backward_ns,
        attributed_via_xla_ns=att.via_xla_ns,
        unattributed_no_forward_ns=att.no_forward_ns,
    )


def gpu_profile_stacks(
    activities: Sequence[GpuActivity], process_names: Mapping[int, str] | None = None
) -> tuple[WeightedStack, ...]:
    """Stacks for ``Profile.gpu``: Python frames → CUDA API → kernel, value = GPU ns."""
    return gpu_stacks(activities, process_names)


def summarise_metrics(metrics: Sequence[GpuMetricSample]) -> tuple[MetricSummary, ...]:
    """Mean and max of each (device, metric, pid) series."""
    acc: dict[tuple[int, str, int], list[float]] = defaultdict(list)
    for m in metrics:
        if not m.correlation_id:
            acc[(m.device, m.metric, m.pid)].append(m.value)
    return tuple(
        MetricSummary(dev, name, pid, sum(v) / len(v), max(v), len(v))
        for (dev, name, pid), v in sorted(acc.items())
    )
