"""Findings: verdicts on a session's GPU use, with the figures behind them.

The facade for reports, the operator and the metric::

    from kubeprof.analysis.findings import analyse
    result = analyse(activities, metrics, cpu_columns_or_None, Window(start_ns, end_ns))
    result.headline          # IdleFigure: steady-state GPU idle (ratio None + reason without data)
    result.phases            # start-up / warm-up / steady / tail windows and how they were found
    result.figures           # idle of each phase
    result.timeline          # busy ns per 100 ms bucket over the session
    result.breakdown         # steady-state idle by cause (host, sync, launch, other)
    result.cpu_during_idle   # the launching thread's CPU frames during steady-state idle
    result.findings          # Finding list, most severe first
    result.verdict           # "" when findings were looked for; else why none were (too short)
    result.waits             # the launcher in the long host waits: on/off CPU, where, pipeline

Each finding kind is a module with ``find(ctx) -> Finding | None``; ``run_all`` runs them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kubeprof.analysis import cpu_during_idle as cdi
from kubeprof.analysis import gpu_trace, host_waits, idle_breakdown, phases, steady_idle
from kubeprof.analysis.cpu_samples import SampleColumns
from kubeprof.analysis.findings import (
    copy_bound,
    fusion,
    kernel_bound,
    launch_bound,
    pageable_memcpy,
    starved,
    sync_stall,
    waiting,
)
from kubeprof.analysis.findings.context import LONG_GAP_NS as LONG_HOST_GAP_NS
from kubeprof.analysis.findings.context import Context
from kubeprof.analysis.findings.model import Evidence, Finding, Gain, Kind, Severity
from kubeprof.analysis.findings.stake import capped
from kubeprof.analysis.idle_breakdown import LAUNCH_GAP_NS, IdleBreakdown
from kubeprof.analysis.phases import Phases, Window
from kubeprof.analysis.steady_idle import IdleFigure, PhaseFigures, Timeline
from kubeprof.model import GpuActivity, GpuMetricSample, OffCpuSample

FINDERS: tuple[Callable[[Context], Finding | None], ...] = (
    copy_bound.find,
    waiting.find_input_starved,
    waiting.find_waiting_for_work,
    starved.find,
    launch_bound.find,
    sync_stall.find,
    fusion.find,
    pageable_memcpy.find,
    kernel_bound.find,
)
_ORDER = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass(frozen=True, slots=True)
class Analysis:
    """Everything the findings layer concluded about one session."""

    headline: IdleFigure  # steady-state GPU idle
    phases: Phases
    figures: PhaseFigures
    timeline: Timeline
    breakdown: IdleBreakdown | None  # None without kernels
    cpu_during_idle: cdi.CpuDuringIdle | None  # None without CPU samples of the launcher
    findings: tuple[Finding, ...]
    cpu_note: str = ""  # why cpu_during_idle is None
    verdict: str = ""  # why no finding was looked for ("" when they were)
    waits: host_waits.HostWaits | None = None  # the launcher during the long host waits


def analyse(
    activities: Sequence[GpuActivity],
    metrics: Sequence[GpuMetricSample],
    cpu: SampleColumns | None,
    session: Window,
    *,
    gpu_traced: bool = True,
    untraced_reason: str = "",
    offcpu: Sequence[OffCpuSample] = (),
    trace: gpu_trace.GpuTrace | None = None,
) -> Analysis:
    """Analyse a session; ``gpu_traced=False`` (with the reason) when the tracer did not run.

    ``offcpu``: the session's off-CPU samples, where recorded: they say where the launching
    thread waited while the GPU idled. ``trace``: ``gpu_trace.build(activities)`` when the
    caller has built it already (a report shares it with ``gpu_summary``)."""
    trace = trace if trace is not None else gpu_trace.build(activities)
    ph = phases.detect(trace, session)
    figures = steady_idle.phase_figures(trace, ph)
    tl = steady_idle.timeline(trace, ph.session)
    if not gpu_traced or not trace.work:
        reason = (
            f"GPU tracing was off: {untraced_reason}"
            if not gpu_traced
            else "the GPU tracer ran but recorded no kernels, copies or memsets"
        )
        off = steady_idle.no_data(ph.steady, reason)
        figures = PhaseFigures(
            *(
                steady_idle.no_data(w, reason)
                for w in (ph.startup, ph.warmup, ph.steady, ph.tail, ph.session)
            )
        )
        return Analysis(off, ph, figures, tl, None, None, (), "no GPU data")
    launcher = cdi.launching_thread(cpu, trace, ph.steady) if cpu is not None else None
    idle = trace.idle(ph.steady.start_ns, ph.steady.end_ns)
    parts = idle_breakdown.split(trace, ph.steady, idle)
    bd = idle_breakdown.breakdown(
        trace,
        ph.steady,
        launcher,
        cpu.period_ns if cpu is not None else 0.0,
        cpu.source if cpu is not None else "",
        parts,
    )
    during = None
    note = "no CPU samples" if cpu is None else "no CPU samples of a kernel-launching process"
    if cpu is not None and launcher is not None:
        stretches = sorted(
            iv
            for p in parts.values()
            for iv in (*p.host, *p.sync)
            if iv[1] - iv[0] >= LAUNCH_GAP_NS
        )
        during = cdi.during(cpu, launcher, stretches)
        note = ""
    long_gaps = sorted(
        iv for p in parts.values() for iv in p.host if iv[1] - iv[0] >= LONG_HOST_GAP_NS
    )
    waits = host_waits.analyse(trace, long_gaps, cpu, launcher, offcpu)
    ctx = Context(trace, ph, figures, parts, bd, during, metrics, idle, waits)
    short = phases.too_short(ph)
    found = () if short else run_all(ctx)
    return Analysis(figures.steady, ph, figures, tl, bd, during, found, note, short, waits)


def run_all(ctx: Context) -> tuple[Finding, ...]:
    """Every finder over one context, most severe first; severity capped by what is at stake
    (``stake``)."""
    out = [capped(f) for find in FINDERS if (f := find(ctx)) is not None]
    out.sort(key=rank)
    return tuple(out)


def rank(f: Finding) -> tuple[int, float]:
    """Sort key: most severe first, then the largest estimated gain."""
    return (_ORDER[f.severity], -(f.gain.share if f.gain else 0.0))


__all__ = [
    "Analysis",
    "Context",
    "Evidence",
    "Finding",
    "Gain",
    "Kind",
    "SampleColumns",
    "Severity",
    "Window",
    "analyse",
    "rank",
    "run_all",
]
