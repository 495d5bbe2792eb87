"""The wire format: frozen records shared by collectors, reporters, ingest and storage.

One definition serves the local recorder, the cluster agent and the operator's ingest API,
so a record means the same thing wherever it travels. Stacks are ordered root first, leaf
last (the order of Brendan Gregg's folded format), and a frame is identified by its fields.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache


class FrameKind(StrEnum):
    """Where a frame comes from; renderers colour by it and GPU joins key on it."""

    PYTHON = "python"  # a Python function (file and line known)
    NATIVE = "native"  # user-space machine code (ELF symbol or perf map)
    KERNEL = "kernel"  # Linux kernel code
    CUDA_API = "cuda_api"  # a CUDA runtime or driver API call (cudaLaunchKernel, ...)
    GPU = "gpu"  # a CUDA kernel, memcpy or memset executing on the device
    PROCESS = "process"  # synthetic root naming the process (used by renderers only)


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of a stack."""

    name: str  # function or symbol name, demangled where possible; "[unknown]" if unresolved
    kind: FrameKind = FrameKind.NATIVE
    file: str = ""  # Python source file, or the ELF object for native frames
    line: int = 0  # Python line number (0 when not known)

    def label(self) -> str:
        """Human-readable one-line label used by text/collapsed output."""
        if self.kind is FrameKind.PYTHON and self.file:
            short = self.file.rsplit("/", 1)[-1]
            return f"{self.name} ({short}:{self.line})" if self.line else f"{self.name} ({short})"
        if self.kind is FrameKind.NATIVE and self.name == "[unknown]" and self.file:
            # A stripped object: name at least the library, as `perf report` does.
            return f"[unknown] ({self.file.rsplit('/', 1)[-1]})"
        if self.kind is FrameKind.KERNEL:
            return f"{self.name}_[k]"
        if self.kind is FrameKind.GPU:
            return f"{self.name}_[gpu]"
        return self.name

    def key(self) -> str:
        """Stable text key used for interning (hashing) frames."""
        return f"{self.kind.value}\x1f{self.name}\x1f{self.file}\x1f{self.line}"


Stack = tuple[Frame, ...]


@lru_cache(maxsize=1 << 16)
def stack_hash(stack: Stack) -> int:
    """Signed 64-bit hash of a stack, stable across processes and machines.

    Stacks are interned by this value (hash -> id) so samples stay small; it fits a
    Postgres BIGINT and an SQLite INTEGER. Cached: a profile repeats few distinct stacks
    many times, and hashing every frame's text was most of the ingest time.
    """
    h = hashlib.blake2b(digest_size=8)
    for frame in stack:
        h.update(frame.key().encode())
        h.update(b"\x1e")
    return int.from_bytes(h.digest(), "big", signed=True)


@dataclass(frozen=True, slots=True)
class CpuSample:
    """One on-CPU sample of one thread."""

    ts_ns: int  # CLOCK_MONOTONIC nanoseconds when the sample fired
    pid: int  # process id (tgid) in the profiler's PID namespace
    tid: int  # thread id
    thread: str  # thread name (comm) at sample time
    cpu: int  # CPU the thread was running on
    stack: Stack  # root first, leaf last; kernel frames (if any) at the leaf end


class OffCpuSource(StrEnum):
    """How an off-CPU sample was taken: it decides what its time means."""

    BPF_SCHED = "bpf-sched"  # measured: switch-out to switch-in, from the sched_switch tracepoint
    SAMPLED_WALL = "sampled-wall"  # sampled: a thread seen not running (py-spy --idle, /proc)


@dataclass(frozen=True, slots=True)
class OffCpuSample:
    """A span one thread spent off CPU (blocked or sleeping), with the stack it waited in.

    Kept apart from CpuSample: an on-CPU sample stands for one sampling period, an
    off-CPU sample for a measured (or sampled) stretch of waiting, so the two add up to a
    thread's wall-clock time only through `weight_ns`.
    """

    ts_ns: int  # CLOCK_MONOTONIC ns when the thread left the CPU (bpf-sched) or was seen idle
    pid: int  # process id (tgid) in the profiler's PID namespace
    tid: int  # thread id
    thread: str  # thread name (comm)
    # bpf-sched: ns off CPU from ts_ns until the wait ended (the sum of its off-CPU spans
    # when one wait switched out more than once); sampled-wall: the sampling interval.
    blocked_ns: int
    # Wall time this sample stands for in a profile: blocked_ns times the switch-sampling
    # factor (1-in-N switch-outs kept), or the sampling interval for sampled-wall.
    weight_ns: int
    # Why it waited: the blocking syscall ("read", "futex", "clock_nanosleep", ...), else
    # "wchan:<kernel function>" or the thread state ("sleeping", "disk"); "" when unknown.
    reason: str
    source: str  # an OffCpuSource value
    stack: Stack  # root first, leaf last, as in CpuSample; () when it could not be read


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """A process seen during a session, so reports can name it after it exits."""

    pid: int
    ppid: int
    name: str  # comm
    cmdline: str  # argv joined by spaces, truncated by the collector
    container_id: str = ""  # set by the cluster agent
    pod_uid: str = ""  # set by the cluster agent


@dataclass(frozen=True, slots=True)
class GpuActivity:
    """A span of work on a GPU: a kernel, a memcpy or a memset (from CUPTI activity)."""

    kind: str  # "kernel" | "memcpy" | "memset"
    name: str  # raw (mangled) kernel name, or e.g. "memcpy HtoD"
    start_ns: int  # GPU timestamp, converted to the host's CLOCK_MONOTONIC
    end_ns: int
    device: int  # CUDA device ordinal
    pid: int
    correlation_id: int  # CUPTI correlation id of the launching API call
    stream: int = 0
    demangled: str = ""  # demangled kernel name ("" for memcpy/memset)
    grid: tuple[int, int, int] = (0, 0, 0)
    block: tuple[int, int, int] = (0, 0, 0)
    registers: int = 0
    shared_mem: int = 0  # static + dynamic shared memory bytes
    bytes: int = 0  # bytes moved (memcpy/memset)
    stack: Stack = ()  # launching stack (Python -> CUDA API), root first; () if unknown
    # When the launching API call was entered (host CLOCK_MONOTONIC ns, as CPU samples) and
    # on which thread (the host's kernel thread id); 0 if not recorded (tracers before wire
    # version 2, every fixture recorded before them)
    launch_ns: int = 0
    launch_tid: int = 0


@dataclass(frozen=True, slots=True)
class GpuMetricSample:
    """One reading of a device or per-process GPU metric (NVML, GPM, PM sampling)."""

    ts_ns: int  # CLOCK_MONOTONIC nanoseconds
    device: int
    metric: str  # e.g. "gpu_util_pct", "power_mw", "sm_clock_mhz", "gpm_sm_active_pct"
    value: float
    pid: int = 0  # 0 for device-wide metrics
    correlation_id: int = 0  # set for per-kernel metrics (PM sampling)


@dataclass(frozen=True, slots=True)
class GpuTracerState:
    """What an injected pod's dormant GPU tracer answered the node agent (cluster only).

    The agent re-sends these whenever one changes; the store keeps the latest per process,
    and the session's status counts pods traced and refused, with the reasons."""

    pod_uid: str
    pid: int  # the process listening on the control socket, in the agent's pid namespace
    socket: str  # the control socket's file name, ``<pid in the pod>-<random>.sock``
    state: str  # "on" (tracing for this session), "off" (was on, let go), "refused"
    reason: str = ""  # the tracer's own words when refused (also in the pod's log)


@dataclass(frozen=True, slots=True)
class Batch:
    """What a collector hands to a reporter, and what the agent ships to ingest."""

    samples: tuple[CpuSample, ...] = ()
    processes: tuple[ProcessInfo, ...] = ()
    gpu_activities: tuple[GpuActivity, ...] = ()
    gpu_metrics: tuple[GpuMetricSample, ...] = ()
    counters: dict[str, int] = field(default_factory=dict)  # e.g. {"gpu_dropped": 3}
    gpu_tracers: tuple[GpuTracerState, ...] = ()  # injected tracers' answers (node agent)
    offcpu_samples: tuple[OffCpuSample, ...] = ()  # waits of target threads (off-CPU view)


@dataclass(frozen=True, slots=True)
class WeightedStack:
    """One distinct stack of one thread, with how often / how long it was seen."""

    stack: Stack  # root first, leaf last
    pid: int
    tid: int
    thread: str  # thread name
    process: str  # process name (comm) or command line
    samples: int  # number of samples (CPU) or kernel launches (GPU)
    value_ns: int  # CPU: samples * sampling period; GPU: device time in ns
