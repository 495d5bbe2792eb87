"""Building collectors by name, for `kubeprof record` and the node agent alike.

One options object feeds every factory; `start` builds the named collectors, keeps going
when one cannot start on this machine (no BPF, no GPU) and says why. A collector with a
stand-in for machines where it cannot run chooses it inside its own factory (the CPU
sampler falls back to py-spy there) and tells through `CollectorOptions.note`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kubeprof.agent.driver import Collector
from kubeprof.protocol.settings import (
    DEFAULT_CPU_HZ,
    DEFAULT_OFFCPU_EVERY,
    DEFAULT_OFFCPU_MIN_US,
)

log = logging.getLogger("kubeprof.agent")


@dataclass(frozen=True, slots=True)
class CollectorOptions:
    """Settings the factories read."""

    hz: int = DEFAULT_CPU_HZ  # CPU sampling frequency
    offcpu_min_us: int = DEFAULT_OFFCPU_MIN_US  # off-CPU waits shorter get no stack
    offcpu_every: int = DEFAULT_OFFCPU_EVERY  # follow 1 in N switch-outs; 0: no off-CPU
    nvml_interval_s: float = 1.0  # NVML sampling period
    gpu_socket: str | None = None  # where the GPU receiver listens for in-process tracers
    # Its mode: 0600 for `kubeprof record` (same user); the node agent's is 0666, since
    # workloads run as any uid (it checks each connecting process's pod instead).
    gpu_socket_mode: int = 0o600
    # `kubeprof record`: the command starts at once, py-spy sampling it while the BPF
    # sampler compiles (cpu/handover.py); the node agents compile once and wait.
    quick_start: bool = False
    # Where one-line notes go (the recorder prints them; the agent logs them).
    note: Callable[[str], None] = field(default=lambda msg: log.warning("%s", msg))


@dataclass(frozen=True, slots=True)
class Built:
    """One started collector and what a command it profiles needs in its environment."""

    collector: Collector
    env: Mapping[str, str] = field(default_factory=dict)


Factory = Callable[[CollectorOptions], Built]


def _cpu(opts: CollectorOptions) -> Built:
    """The BPF sampler where it loads, else the py-spy sampler ($KUBEPROF_CPU_SOURCE forces);
    with `quick_start` (and no forced source) py-spy covers the BPF compile."""
    import os

    from kubeprof.agent.cpu.offcpu_probe import OffCpuKnobs
    from kubeprof.agent.cpu.pyspy_collector import (
        ENV_SOURCE,
        PyspyCollectorError,
        open_cpu_collector,
    )

    knobs = OffCpuKnobs(min_us=opts.offcpu_min_us, every=opts.offcpu_every)
    if opts.quick_start and os.environ.get(ENV_SOURCE, "auto") == "auto":
        from kubeprof.agent.cpu.handover import open_quick

        try:
            return Built(open_quick(opts.hz, opts.note, knobs))
        except PyspyCollectorError:  # no py-spy here: wait for the compile, as before
            pass
    return Built(open_cpu_collector(opts.hz, opts.note, offcpu=knobs))


def _gpu(opts: CollectorOptions) -> Built:
    """The receiver for CUPTI tracers injected into a command started with its `env`."""
    if not opts.gpu_socket:
        raise ValueError("the GPU receiver needs a socket path (CollectorOptions.gpu_socket)")
    from kubeprof.agent.gpu.inject import tracer_env, xla_dump_dir
    from kubeprof.agent.gpu.receiver import GpuReceiver

    xla = xla_dump_dir(opts.gpu_socket)
    rx = GpuReceiver(
        opts.gpu_socket, mode=opts.gpu_socket_mode, xla_dump_dir=xla.path, remove_xla_dump=xla.ours
    )
    rx.start()
    return Built(rx, tracer_env(opts.gpu_socket, xla_dump_dir=xla.path))


def _nvml(opts: CollectorOptions) -> Built:
    from kubeprof.agent.gpu.nvml import NvmlSampler

    sampler = NvmlSampler(interval_s=opts.nvml_interval_s)
    sampler.start()
    return Built(sampler)


FACTORIES: dict[str, Factory] = {"cpu": _cpu, "gpu": _gpu, "nvml": _nvml}


@dataclass
class Started:
    """What `start` built: running collectors, the ones that failed and why, child env."""

    running: dict[str, Collector] = field(default_factory=dict)
    failed: dict[str, Exception] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # for a command the collectors profile

    def stop_all(self) -> None:
        """Undo a start that is abandoned (a required collector failed)."""
        for c in self.running.values():
            try:
                c.stop()
            except Exception as exc:  # noqa: BLE001 - best effort while giving up
                log.debug("stopping %s: %s", type(c).__name__, exc)


def start(
    names: list[str],
    opts: CollectorOptions,
    factories: Mapping[str, Factory] | None = None,
) -> Started:
    """Start the named collectors in order; one that fails does not stop the others."""
    table = FACTORIES if factories is None else factories
    out = Started()
    for name in names:
        try:
            built = _build(table, name, opts)
        except Exception as exc:  # noqa: BLE001 - one collector must not stop the others
            out.failed[name] = exc
            log.warning("collector %s is off on this node: %s: %s", name, type(exc).__name__, exc)
            continue
        out.running[name] = built.collector
        out.env.update(built.env)
    return out


def _build(table: Mapping[str, Factory], name: str, opts: CollectorOptions) -> Built:
    factory = table.get(name)
    if factory is None:
        raise LookupError(f"unknown collector {name!r}; known: {', '.join(sorted(table))}")
    return factory(opts)
