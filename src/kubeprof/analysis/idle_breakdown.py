"""Why the GPU was idle: each idle nanosecond of a window in one category (after HTA's
idle-time breakdown, with the records kubeprof has).

- ``sync``: a CUDA synchronization record overlaps it (the host blocked in
  cudaStreamSynchronize/cudaEventSynchronize/.item(), or a stream waiting on an event);
- ``launch``: a gap shorter than LAUNCH_GAP_NS between kernels: launch and queue overhead;
- ``host``: nothing was queued: the launching process had not issued the next work.
  With CPU samples it splits into ``host_on_cpu`` (the launching thread on CPU in non-CUDA
  work: data loading, Python) and ``other`` (the thread off CPU: sleeping, I/O, locks),
  estimated from the sample count times the sampling period.

Categories are taken in that order, so they add up to the idle time exactly. A copy or memset
is not idle time at all: it keeps the device busy (``gpu_trace``), and the headline shows
copy-busy beside kernel-busy instead.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from kubeprof.analysis.cpu_samples import ThreadSamples
from kubeprof.analysis.gpu_timeline import Interval, merge, total
from kubeprof.analysis.gpu_trace import GpuTrace, intersect, subtract
from kubeprof.analysis.phases import Window

LAUNCH_GAP_NS = 10_000  # gaps below this are launch overhead (HTA's "kernel wait")


@dataclass(frozen=True, slots=True)
class IdleBreakdown:
    """Idle time of a window by cause, summed over devices (ns)."""

    window: Window
    idle_ns: int
    sync_ns: int
    launch_ns: int
    host_ns: int  # nothing queued; = host_on_cpu_ns + other_ns when CPU samples exist
    host_on_cpu_ns: int | None = None  # None: no CPU samples of the launching thread
    cpu_source: str = ""  # sampler the split is estimated from

    @property
    def other_ns(self) -> int | None:
        return None if self.host_on_cpu_ns is None else self.host_ns - self.host_on_cpu_ns

    def shares(self) -> dict[str, float]:
        """Share of the idle time per category (host split when CPU samples exist)."""
        if self.idle_ns <= 0:
            return {}
        parts = {"sync": self.sync_ns, "launch": self.launch_ns}
        if self.host_on_cpu_ns is None:
            parts["host"] = self.host_ns
        else:
            parts["host"] = self.host_on_cpu_ns
            parts["other"] = self.host_ns - self.host_on_cpu_ns
        return {k: v / self.idle_ns for k, v in parts.items()}


@dataclass(frozen=True, slots=True)
class IdleParts:
    """The classified idle intervals (all devices), for the analyses that need them."""

    sync: list[Interval]
    launch: list[Interval]
    host: list[Interval]


def split(
    trace: GpuTrace, window: Window, idle: dict[int, list[Interval]] | None = None
) -> dict[int, IdleParts]:
    """Idle intervals of ``window`` per device, by category (``idle``: trace.idle(window))."""
    syncs: dict[int, list[Interval]] = defaultdict(list)
    for s in trace.syncs:
        for dev in trace.busy if s.device < 0 else (s.device,):
            syncs[dev].append((s.start_ns, s.end_ns))
    out = {}
    if idle is None:
        idle = trace.idle(window.start_ns, window.end_ns)
    for dev, dev_idle in idle.items():
        sync = intersect(dev_idle, merge(syncs.get(dev, ())))
        rest = subtract(dev_idle, sync)
        launch = [iv for iv in rest if iv[1] - iv[0] < LAUNCH_GAP_NS]
        host = [iv for iv in rest if iv[1] - iv[0] >= LAUNCH_GAP_NS]
        out[dev] = IdleParts(sync, launch, host)
    return out


def breakdown(
    trace: GpuTrace,
    window: Window,
    launcher: ThreadSamples | None = None,
    period_ns: float = 0.0,
    cpu_source: str = "",
    parts: dict[int, IdleParts] | None = None,
) -> IdleBreakdown:
    """Idle of ``window`` by cause; ``launcher`` (with its sampling period) splits ``host``.

    ``parts`` is ``split(trace, window)`` when the caller has it already.
    """
    parts = split(trace, window) if parts is None else parts
    host = [iv for p in parts.values() for iv in p.host]
    on_cpu = None
    if launcher is not None and period_ns > 0:
        host_ns = total(host)
        samples = 0
        lo = 0
        for s, e in sorted(host):
            i, lo = launcher.span(s, e, lo)
            samples += lo - i
        on_cpu = min(host_ns, round(samples * period_ns))
    return IdleBreakdown(
        window=window,
        idle_ns=sum(total(p.sync) + total(p.launch) + total(p.host) for p in parts.values()),
        sync_ns=sum(total(p.sync) for p in parts.values()),
        launch_ns=sum(total(p.launch) for p in parts.values()),
        host_ns=total(host),
        host_on_cpu_ns=on_cpu,
        cpu_source=cpu_source if on_cpu is not None else "",
    )
