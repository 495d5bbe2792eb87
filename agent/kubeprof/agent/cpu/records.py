"""CPU and off-CPU samples from what a sampler saw of a thread at one instant.

Both CPU sources (the BPF sampler's raw records, py-spy's ticks) see a thread as the
same four facts: when, which process, which thread and its name. The model records are
built from them here, once, so the two sources cannot disagree on a field.
"""

from __future__ import annotations

from typing import Protocol

from kubeprof.model import CpuSample, OffCpuSample, OffCpuSource, Stack


class ThreadSeen(Protocol):
    """A thread seen at one instant (read-only, as the samplers' records are)."""

    @property
    def ts_ns(self) -> int: ...
    @property
    def pid(self) -> int: ...
    @property
    def tid(self) -> int: ...
    @property
    def comm(self) -> str: ...


def on_cpu(seen: ThreadSeen, cpu: int, stack: Stack) -> CpuSample:
    """The thread running on `cpu` in `stack`."""
    return CpuSample(seen.ts_ns, seen.pid, seen.tid, seen.comm, cpu, stack)


def waiting(
    seen: ThreadSeen,
    blocked_ns: int,
    weight_ns: int,
    reason: str,
    source: OffCpuSource,
    stack: Stack,
) -> OffCpuSample:
    """The thread waiting (`OffCpuSample` says what each number means)."""
    return OffCpuSample(
        seen.ts_ns,
        seen.pid,
        seen.tid,
        seen.comm,
        blocked_ns,
        weight_ns,
        reason,
        source.value,
        stack,
    )
