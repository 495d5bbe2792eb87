"""Rolling-window GPU idle per pod and per GPU, from NVML polls (pure: no I/O, no clock).

Per poll, a container's busy figure on a GPU is the sum of its processes' ``smUtil``
samples newer than the previous poll (capped at 100 %). NVML returns samples only for
processes that ran kernels in that period, so a process in the running list without a
sample was idle: it counts as 0, not as missing. The idle ratio over the window is
``1 - mean(busy) / 100`` over the polls in which the container held the GPU.

Where NVML cannot attribute work to a process (MIG mode, MPS clients, a failing
process-utilization call) no per-pod busy/idle figure is made for that GPU: the reason is
reported instead, and only memory (which NVML does give per process) is kept.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kubeprof.agent.light.readings import DeviceReading
from kubeprof.analysis import nvml_idle


@dataclass(frozen=True, slots=True, order=True)
class Owner:
    """The container a GPU process belongs to."""

    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, slots=True)
class PollFacts:
    """One GPU in one poll, attributed."""

    gpu: int
    util_gpu: int
    mem_used: int
    mem_total: int
    busy: dict[Owner, float]  # percent, only where attributable
    memory: dict[Owner, int]  # bytes
    reason: str  # "" when per-process attribution holds, else why not


def unattributable_reason(r: DeviceReading) -> str:
    """Why NVML's per-process figures cannot be trusted on this GPU ("" when they can)."""
    if r.mig:
        return "mig"  # process utilization is not reported per MIG instance
    if r.mps_processes:
        return "mps"  # MPS clients' work runs in the MPS server's context
    if r.util_error:
        return "nvml_error"
    return ""


def attribute(r: DeviceReading, owner_of: Callable[[int], Owner | None]) -> PollFacts:
    """PollFacts for one reading; processes outside any pod are left out."""
    reason = unattributable_reason(r)
    memory: dict[Owner, int] = {}
    pids: dict[Owner, set[int]] = {}
    for p in (*r.processes, *r.mps_processes):
        owner = owner_of(p.pid)
        if owner is None:
            continue
        memory[owner] = memory.get(owner, 0) + p.usedGpuMemory
        pids.setdefault(owner, set()).add(p.pid)
    busy: dict[Owner, float] = {}
    if not reason:
        running = {p.pid for p in (*r.processes, *r.mps_processes)}
        samples = [(s.pid, float(s.smUtil)) for s in r.samples]
        for owner, mine in pids.items():
            b = nvml_idle.poll_busy(running, samples, mine)
            if b is not None:
                busy[owner] = b
    return PollFacts(r.gpu, r.util_gpu, r.mem_used, r.mem_total, busy, memory, reason)


@dataclass(frozen=True, slots=True)
class PodFigure:
    """One container on one GPU over the window."""

    owner: Owner
    gpu: int
    busy_pct: float  # mean over the polls in which it held the GPU
    idle_ratio: float | None  # None where NVML could not attribute
    memory_bytes: int  # latest poll
    polls: int


@dataclass(frozen=True, slots=True)
class GpuFigure:
    """One GPU over the window."""

    gpu: int
    util_pct: float  # mean of nvmlDeviceGetUtilizationRates().gpu
    mem_used: int  # latest
    mem_total: int
    reason: str  # latest; "" = per-process figures are attributed


class Window:
    """The polls of the last ``seconds`` (timestamps given by the caller, monotonic)."""

    def __init__(self, seconds: float) -> None:
        if seconds <= 0:
            raise ValueError(f"window must be positive seconds, got {seconds}")
        self.seconds = seconds
        self._polls: deque[tuple[float, list[PollFacts]]] = deque()

    def add(self, ts: float, facts: Iterable[PollFacts]) -> None:
        self._polls.append((ts, list(facts)))
        while self._polls and self._polls[0][0] <= ts - self.seconds:
            self._polls.popleft()

    def pods(self) -> list[PodFigure]:
        """Figures per (container, GPU) that appeared in the window's polls."""
        busy: dict[tuple[Owner, int], list[float]] = {}
        seen: dict[tuple[Owner, int], int] = {}
        mem: dict[tuple[Owner, int], int] = {}
        blocked: set[tuple[Owner, int]] = set()
        for _, facts in self._polls:
            for f in facts:
                for owner, b in f.busy.items():
                    busy.setdefault((owner, f.gpu), []).append(b)
                for owner, m in f.memory.items():
                    key = (owner, f.gpu)
                    seen[key] = seen.get(key, 0) + 1
                    mem[key] = m
                    if f.reason:
                        blocked.add(key)
        out = []
        for key in sorted(seen):
            vals = busy.get(key, [])
            mean = sum(vals) / len(vals) if vals else 0.0
            idle = None if key in blocked else nvml_idle.idle_ratio(vals)
            out.append(PodFigure(key[0], key[1], mean, idle, mem[key], seen[key]))
        return out

    def gpus(self) -> list[GpuFigure]:
        """Device-wide figures per GPU seen in the window."""
        util: dict[int, list[int]] = {}
        last: dict[int, PollFacts] = {}
        for _, facts in self._polls:
            for f in facts:
                util.setdefault(f.gpu, []).append(f.util_gpu)
                last[f.gpu] = f
        return [
            GpuFigure(g, sum(u) / len(u), last[g].mem_used, last[g].mem_total, last[g].reason)
            for g, u in sorted(util.items())
        ]
