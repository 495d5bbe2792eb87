"""The collectors a node agent can run, behind one small interface.

A collector is anything with `poll() -> Batch` and `stop() -> Batch`; those that profile
particular processes also have `add_target(pid)`. New collectors register a factory here;
the agent loop does not change. A collector that cannot start on this node (no BPF, no
GPU) is reported and skipped: the others still run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kubeprof.model import Batch

log = logging.getLogger("kubeprof.agent")


@runtime_checkable
class Collector(Protocol):
    """What the agent loop needs of a collector."""

    def poll(self) -> Batch: ...

    def stop(self) -> Batch: ...


@runtime_checkable
class TargetedCollector(Collector, Protocol):
    """A collector that profiles chosen processes (the CPU sampler)."""

    def add_target(self, pid: int) -> None: ...


@dataclass(frozen=True, slots=True)
class CollectorOptions:
    """Settings the factories read."""

    hz: int = 99  # CPU sampling frequency
    nvml_interval_s: float = 1.0  # NVML sampling period


def _cpu(opts: CollectorOptions) -> Collector:
    from kubeprof.agent.cpu.collector import CpuCollector

    return CpuCollector(hz=opts.hz)


def _nvml(opts: CollectorOptions) -> Collector:
    from kubeprof.agent.gpu.nvml import NvmlSampler

    sampler = NvmlSampler(interval_s=opts.nvml_interval_s)
    sampler.start()
    return sampler


FACTORIES: dict[str, Callable[[CollectorOptions], Collector]] = {"cpu": _cpu, "nvml": _nvml}


def start(names: list[str], opts: CollectorOptions,
          factories: dict[str, Callable[[CollectorOptions], Collector]] | None = None,
          ) -> tuple[dict[str, Collector], dict[str, str]]:
    """Start the named collectors; returns (running by name, failed name -> reason)."""
    running: dict[str, Collector] = {}
    failed: dict[str, str] = {}
    table = factories if factories is not None else FACTORIES
    for name in names:
        factory = table.get(name)
        if factory is None:
            failed[name] = f"unknown collector {name!r}; known: {', '.join(sorted(table))}"
            continue
        try:
            running[name] = factory(opts)
        except Exception as exc:  # noqa: BLE001 - one collector must not stop the others
            failed[name] = f"{type(exc).__name__}: {exc}"
            log.warning("collector %s is off on this node: %s", name, failed[name])
    return running, failed
