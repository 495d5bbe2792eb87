"""A session as a timeline: Chrome trace-event JSON, opened by ui.perfetto.dev and
chrome://tracing (the ``{"traceEvents": [...]}`` object form of the Trace Event Format).

Tracks, top to bottom:
- "kubeprof phases": start-up, warm-up, steady state and tail (analysis.phases);
- one process per GPU, one thread per stream: kernels, copies and memsets as complete
  ("X") slices, with grid, block, registers, bytes and the launching Python line as args;
- per profiled process: each sampled thread's CPU stacks as nested begin/end slices (a
  flame chart: consecutive samples that share a frame extend its slice, a gap longer than
  two sampling periods ends every slice), its off-CPU waits beside them (named by why it
  waited), each launch as an instant slice on the thread that called it, when it called
  it, with a flow arrow from it to its kernel (``bind_id`` with ``flow_out``/``flow_in``),
  NVTX ranges and host syncs as async slices (they overlap).

Records of tracers before GPU wire version 2 (every fixture recorded before it) carry no
launch time: their launches go on a "CUDA launches" thread at their kernel's start (the
latest time they can have been called), and that thread's name says so. Times are µs from
the session start. Pure: records in, events out, written one by one.
"""

from __future__ import annotations

import io
import itertools
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TextIO

from kubeprof.analysis.cpu_samples import SampleColumns, ThreadSamples
from kubeprof.analysis.interpreter_frames import fold_stack
from kubeprof.analysis.kernel_names import short_name
from kubeprof.analysis.phases import Phases
from kubeprof.model import Frame, FrameKind, GpuActivity, OffCpuSample, Stack

# Pseudo process and thread ids (Perfetto keeps them as 32-bit; real pids stay below 2**22).
PHASES_PID = 0x7FFE0000
GPU_PID = 0x7FFF0000  # + device ordinal
LAUNCH_TID = 0x7FFF0001  # a profiled process's "CUDA launches" thread
OFFCPU_TID = 0x40000000  # | tid: a thread's off-CPU waits, on a track beside its samples
GAP_PERIODS = 2.0  # a thread unsampled for longer than this many periods was off CPU
DEVICE_WORK = ("kernel", "memcpy", "memset")

Event = dict[str, Any]
_ENCODER = json.JSONEncoder(separators=(",", ":"))  # one encoder: json.dumps builds one a call


def _us(ns: int | float, t0: int) -> float:
    return round((ns - t0) / 1000.0, 3)


def _dur(start_ns: int, end_ns: int, t0: int) -> float:
    """µs from start to end such that ts + dur, summed in floating point as a viewer does,
    never passes the end (a slice must not overlap the next one that starts there)."""
    ts, end = _us(start_ns, t0), _us(end_ns, t0)
    dur = max(round(end - ts, 3), 0.0)
    while dur > 0 and ts + dur > end:  # one or two steps of the sum's own precision
        dur = max(dur - math.ulp(end), 0.0)
    return dur


def _meta(pid: int, tid: int | None, key: str, value: object) -> Event:
    event: Event = {"ph": "M", "pid": pid, "name": key, "args": {}}
    if tid is not None:
        event["tid"] = tid
    event["args"]["sort_index" if key.endswith("sort_index") else "name"] = value
    return event


def launch_site(stack: Stack) -> str:
    """The innermost Python frame of a launching stack (file:line), else its innermost
    frame's label: the line a user changes to change the launch."""
    for frame in reversed(stack):
        if frame.kind is FrameKind.PYTHON:
            return frame.label()
    return stack[-1].label() if stack else "(launching stack not recorded)"


def phase_events(phases: Phases, t0: int) -> list[Event]:
    """The phases track: one slice per non-empty phase."""
    out = [
        _meta(PHASES_PID, None, "process_name", "kubeprof phases"),
        _meta(PHASES_PID, None, "process_sort_index", -2),
        _meta(PHASES_PID, 1, "thread_name", "phases"),
    ]
    steady = "steady state" if phases.loop else "active (no steady loop)"
    for name, w in (
        ("start-up", phases.startup),
        ("warm-up", phases.warmup),
        (steady, phases.steady),
        ("tail", phases.tail),
    ):
        if w.duration_ns > 0:
            args: dict[str, object] = {"method": phases.method}
            if name == "steady state":
                args.update(
                    steps=phases.steps,
                    step_ms=round(phases.step_ns / 1e6, 3),
                    anchor=short_name(phases.anchor),
                )
            out.append(
                {
                    "ph": "X",
                    "cat": "phase",
                    "name": name,
                    "pid": PHASES_PID,
                    "tid": 1,
                    "ts": _us(w.start_ns, t0),
                    "dur": _dur(w.start_ns, w.end_ns, t0),
                    "args": args,
                }
            )
    return out


def gpu_events(activities: Sequence[GpuActivity], t0: int) -> Iterator[Event]:
    """Per GPU and stream the device work, per process its launches (with flow arrows to
    the work they queued), NVTX ranges and host syncs."""
    streams: set[tuple[int, int]] = set()
    untimed: set[int] = set()  # processes with launches drawn at their kernel's start
    threadless: set[int] = set()  # ... with launch times but no thread id
    async_id = 0
    # (pid, correlation id) -> the flow id of its arrow. One launch can queue several
    # kernels under its correlation id (a CUDA graph's replay): one launch slice and one
    # arrow, to the first; ids are numbered so no two launches ever share one.
    flows: dict[tuple[int, int], str] = {}
    # A session has a few hundred kernel names and launching stacks, repeated per step.
    names: dict[str, str] = {}
    sites: dict[int, str] = {}  # by id(): the stacks stay alive in `activities`

    def site(stack: Stack) -> str:
        key = id(stack)
        if key not in sites:
            sites[key] = launch_site(stack)
        return sites[key]

    for a in activities:
        if a.kind in DEVICE_WORK:
            streams.add((a.device, a.stream))
            gpu = GPU_PID + max(a.device, 0)
            name = a.name
            if a.kind == "kernel":
                raw = a.demangled or a.name
                name = names.get(raw) or names.setdefault(raw, short_name(raw))
            args: dict[str, object] = {"correlation_id": a.correlation_id, "pid": a.pid}
            if a.kind == "kernel":
                args.update(
                    kernel=a.demangled or a.name,
                    grid=list(a.grid),
                    block=list(a.block),
                    registers=a.registers,
                    shared_mem=a.shared_mem,
                )
            else:
                args["bytes"] = a.bytes
            if a.stack:
                args["launched_at"] = site(a.stack)
            ts = _us(a.start_ns, t0)
            work: Event = {
                "ph": "X",
                "cat": a.kind,
                "name": name,
                "pid": gpu,
                "tid": a.stream,
                "ts": ts,
                "dur": _dur(a.start_ns, a.end_ns, t0),
                "args": args,
            }
            key = (a.pid, a.correlation_id)
            if not a.correlation_id:
                yield work
            elif key in flows:
                args["launch"] = "one launch queued this and earlier work (a CUDA graph)"
                yield work
            else:
                # The arrow: both slices carry one bind_id (flow_out on the launch,
                # flow_in on the work), the form Chrome itself writes.
                flow = flows[key] = f"0x{len(flows) + 1:x}"
                work.update(bind_id=flow, flow_in=True)
                yield work
                launch = launch_event(a, site(a.stack), t0)
                if not a.launch_ns:
                    untimed.add(a.pid)
                elif not a.launch_tid:
                    threadless.add(a.pid)
                yield {**launch, "bind_id": flow, "flow_out": True}
        elif a.kind in ("nvtx", "sync"):
            async_id += 1
            name = a.name if a.kind == "nvtx" else f"host sync: {a.name}"
            common = {"cat": a.kind, "name": name, "pid": a.pid, "tid": a.pid, "id": async_id}
            yield (
                {
                    "ph": "b",
                    **common,
                    "ts": _us(a.start_ns, t0),
                    **({"args": {"stream": a.stream}} if a.kind == "sync" else {}),
                }
            )
            yield {"ph": "e", **common, "ts": _us(max(a.end_ns, a.start_ns), t0)}
    for device in sorted({d for d, _ in streams}):
        gpu = GPU_PID + max(device, 0)
        yield _meta(gpu, None, "process_name", f"GPU {device}")
        yield _meta(gpu, None, "process_sort_index", -1)
    for device, stream in sorted(streams):
        yield _meta(GPU_PID + max(device, 0), stream, "thread_name", f"stream {stream}")
    for pid in sorted(untimed | threadless):
        why = [
            *(["calling thread not recorded"] if pid in threadless else []),
            *(["drawn at kernel start: call time not recorded"] if pid in untimed else []),
        ]
        yield _meta(pid, LAUNCH_TID, "thread_name", f"CUDA launches ({'; '.join(why)})")


def launch_event(a: GpuActivity, launched_at: str, t0: int) -> Event:
    """The launch of device work ``a`` as an instant slice: on the thread that called it,
    when it called it; else on its process's "CUDA launches" thread, at the latest time it
    can have been called (the work's start)."""
    api = a.stack[-1].name if a.stack and a.stack[-1].kind is FrameKind.CUDA_API else "launch"
    args: dict[str, object] = {"correlation_id": a.correlation_id, "launched_at": launched_at}
    if a.launch_ns:
        args["queued_us"] = round((a.start_ns - a.launch_ns) / 1000.0, 3)
    return {
        "ph": "X",
        "cat": "launch",
        "name": api,
        "pid": a.pid,
        "tid": (a.launch_tid or LAUNCH_TID) if a.launch_ns else LAUNCH_TID,
        "ts": _us(a.launch_ns or a.start_ns, t0),
        "dur": 0,
        "args": args,
    }


def thread_slices(
    thread: ThreadSamples, labels: Callable[[int], tuple[str, ...]], period_ns: float, t0: int
) -> Iterable[Event]:
    """One thread's samples as nested slices: a frame's slice runs while consecutive
    samples keep it (and every frame above it) on the stack. Begin/end events, not complete
    ones: a callee's end is then the very number its caller's is, so no viewer's float sum
    (ts + dur) can make it end after its caller."""
    open_frames: list[str] = []  # labels, root first
    gap = GAP_PERIODS * period_ns
    last = None

    def event(ph: str, name: str, at_ns: float) -> Event:
        return {
            "ph": ph,
            "cat": "cpu",
            "name": name,
            "pid": thread.pid,
            "tid": thread.tid,
            "ts": _us(at_ns, t0),
        }

    def close(depth: int, end_ns: float) -> Iterable[Event]:
        for name in reversed(open_frames[depth:]):  # innermost first
            yield event("E", name, end_ns)
        del open_frames[depth:]

    for ts, sid in zip(thread.ts_ns, thread.stack_ids, strict=True):
        if last is not None and ts - last > gap:
            yield from close(0, last + period_ns)
        stack = labels(sid)
        keep = 0
        while keep < min(len(open_frames), len(stack)) and open_frames[keep] == stack[keep]:
            keep += 1
        # Frames that open where others closed open 1 ns later: no viewer then has to
        # guess the order of an end and a begin at one instant (speedscope begins first).
        at = ts + 1 if len(open_frames) > keep else ts
        yield from close(keep, ts)
        for label in stack[keep:]:
            yield event("B", label, at)
            open_frames.append(label)
        last = ts
    if last is not None:
        yield from close(0, last + period_ns)


def cpu_events(
    cpu: SampleColumns,
    t0: int,
    *,
    keep_interpreter: bool = False,
    process_names: Mapping[int, str] | None = None,
) -> Iterator[Event]:
    """Every sampled thread's flame chart, with process and thread names."""
    cache: dict[int, tuple[str, ...]] = {}

    def labels(sid: int) -> tuple[str, ...]:
        if sid not in cache:
            stack = cpu.stacks[sid] if keep_interpreter else fold_stack(cpu.stacks[sid])
            cache[sid] = tuple(Frame(f.name, f.kind, f.file).label() for f in stack)
        return cache[sid]

    names = dict(process_names or {})
    for pid in sorted({t.pid for t in cpu.threads}):
        yield _meta(pid, None, "process_name", names.get(pid, f"pid {pid}"))
    for t in cpu.threads:
        yield _meta(t.pid, t.tid, "thread_name", f"{t.thread} [{t.tid}]")
        yield from thread_slices(t, labels, cpu.period_ns, t0)


def offcpu_events(offcpu: Sequence[OffCpuSample], t0: int) -> Iterator[Event]:
    """Each thread's off-CPU waits as slices on a track of their own beside its samples
    ("off-CPU"), named by why it waited, its stack's innermost frame in the args."""
    named: set[tuple[int, int]] = set()
    for w in offcpu:
        tid = OFFCPU_TID | w.tid
        if (w.pid, tid) not in named:
            named.add((w.pid, tid))
            yield _meta(w.pid, tid, "thread_name", f"{w.thread} [{w.tid}] off-CPU")
        args: dict[str, object] = {"source": w.source, "blocked_ms": round(w.blocked_ns / 1e6, 3)}
        if w.stack:
            args["waited_in"] = launch_site(w.stack)
        yield {
            "ph": "X",
            "cat": "off-cpu",
            "name": f"off-CPU: {w.reason or 'unknown'}",
            "pid": w.pid,
            "tid": tid,
            "ts": _us(w.ts_ns, t0),
            "dur": _dur(w.ts_ns, w.ts_ns + w.blocked_ns, t0),
            "args": args,
        }


def events(
    *,
    start_ns: int,
    activities: Sequence[GpuActivity] = (),
    cpu: SampleColumns | None = None,
    offcpu: Sequence[OffCpuSample] = (),
    phases: Phases | None = None,
    process_names: Mapping[int, str] | None = None,
    keep_interpreter: bool = False,
) -> Iterator[Event]:
    """Every event, one at a time (a 1 M-kernel session never holds them all at once);
    `start_ns` (the session start, CLOCK_MONOTONIC) is time 0. Every process is named,
    also one that only launched GPU work or only waited (no CPU samples)."""
    parts: list[Iterable[Event]] = [] if phases is None else [phase_events(phases, start_ns)]
    parts.append(gpu_events(activities, start_ns))
    if cpu is not None:
        parts.append(
            cpu_events(
                cpu, start_ns, keep_interpreter=keep_interpreter, process_names=process_names
            )
        )
    parts.append(offcpu_events(offcpu, start_ns))
    named: set[int] = set()
    seen: set[int] = set()
    for e in itertools.chain.from_iterable(parts):
        (named if e["name"] == "process_name" and e["ph"] == "M" else seen).add(e["pid"])
        yield e
    names = process_names or {}
    for pid in sorted(seen - named):
        yield _meta(pid, None, "process_name", names.get(pid, f"pid {pid}"))


def _header(session: str, start_ns: int) -> dict[str, object]:
    return {
        "displayTimeUnit": "ns",
        "otherData": {
            "session": session,
            "producer": "kubeprof",
            "time_zero_monotonic_ns": start_ns,
        },
    }


def trace_events(*, session: str, **kwargs: Any) -> dict[str, object]:
    """The whole trace object (`events`' arguments), for tests and small sessions."""
    return {**_header(session, kwargs["start_ns"]), "traceEvents": list(events(**kwargs))}


def write_perfetto(stream: TextIO, *, session: str, **kwargs: Any) -> int:
    """Write the trace as compact JSON, event by event (what `kubeprof report -f perfetto`
    does); the number of events written."""
    head = json.dumps(_header(session, kwargs["start_ns"]), separators=(",", ":"))
    stream.write(head[:-1] + ',"traceEvents":[')
    encode = _ENCODER.encode
    n = 0
    chunk: list[str] = []
    for event in events(**kwargs):
        chunk.append(encode(event))
        if len(chunk) == 4096:  # a few large writes, not millions of small ones
            stream.write(("," if n else "") + ",".join(chunk))
            n += len(chunk)
            chunk.clear()
    if chunk:
        stream.write(("," if n else "") + ",".join(chunk))
        n += len(chunk)
    stream.write("]}")
    return n


def render_perfetto(**kwargs: Any) -> str:
    """`write_perfetto` into a string."""
    buf = io.StringIO()
    write_perfetto(buf, **kwargs)
    return buf.getvalue()
