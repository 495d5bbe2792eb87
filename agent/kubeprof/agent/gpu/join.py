"""The join: decoded GPU wire frames -> ``kubeprof.model`` records, with their Python stacks.

Each frame's header defines the connection's strings and stacks, says hello, bye or an
error; its rows become kernel, memcpy, memset and sync activities, each with the stack
``stack_join`` finds for its launch, NVTX ranges from start/end markers, and PM samples.
The join keeps per-connection state and nothing of the transport: the socket server and a
capture replay feed it the same frames (``convert``). Counters in each returned ``Batch``
are increments since the previous one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kubeprof.agent.gpu.demangle import demangle_many
from kubeprof.agent.gpu.launch_threads import launch_of
from kubeprof.agent.gpu.stack_join import ConnState, StackJoin, string
from kubeprof.agent.gpu.xla_hlo import XlaIndex
from kubeprof.model import Batch, GpuActivity, GpuMetricSample, Stack

Header = dict[str, Any]
Records = dict[str, list[tuple[int, ...]]]

_COPY_KINDS = {
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
}
# CUPTI memory kinds of a copy's source and destination; a host copy names its host side
_MEMORY_KINDS = {1: "pageable", 2: "pinned", 5: "managed", 7: "managed"}
_SYNC_TYPES = {1: "event_sync", 2: "stream_wait_event", 3: "stream_sync", 4: "context_sync"}
_MARKER_START, _MARKER_END = 2, 4


# wire record kinds whose rows start with (start, end) in CUPTI's clock
TIMED_KINDS = ("kernel", "memcpy", "memset", "sync")


def memcpy_name(copy_kind: int, src_kind: int, dst_kind: int) -> str:
    """``memcpy HtoD (pageable)``: the direction, and the host memory's kind when one side
    is host memory (pageable copies are staged through a driver buffer and block the host)."""
    name = f"memcpy {_COPY_KINDS.get(copy_kind, copy_kind)}"
    host = _MEMORY_KINDS.get(src_kind) or _MEMORY_KINDS.get(dst_kind)
    return f"{name} ({host})" if host else name


class GpuJoin:
    """Turns frames and connection events into Batches; one per receiver (or replay)."""

    def __init__(self, xla_dump_dir: str | None = None) -> None:
        """``xla_dump_dir``: where traced JAX processes dump their optimised HLO modules
        (see xla_hlo), so XLA's kernels are charged to the Python line of their op."""
        self.messages: list[str] = []  # one-line notes from tracers and about them
        self.targets: dict[int, dict[str, Any]] = {}  # pid -> its hello (argv, versions, config)
        self.tracer_errors: dict[int, str] = {}  # pid -> why its tracer did not start / failed
        self.xla = XlaIndex(xla_dump_dir) if xla_dump_dir else None
        self._demangled: dict[str, str] = {}
        self._counters: dict[str, int] = {}
        self.stacks = StackJoin(self.count, self.xla)

    def convert(
        self,
        frames: Iterable[tuple[ConnState, Header, Records]],
        events: Iterable[tuple[ConnState, str, int]],
    ) -> Batch:
        """Join ``frames`` (in arrival order), then apply ``events`` ((connection,
        "closed"|"bad_frame", bytes of an unfinished frame)); counters since the last call."""
        frames = list(frames)
        self._demangle([h for _, h, _ in frames])
        acts: list[GpuActivity] = []
        metrics: list[GpuMetricSample] = []
        for conn, header, records in frames:
            self._apply(conn, header, records, acts)
            off = int(header.get("clock_offset_ns", 0))
            for start, end, device, milli, name in records.get("pm", ()):
                metrics.append(
                    GpuMetricSample(
                        (start + end) // 2 + off,
                        device,
                        f"pm:{string(conn, name)}",
                        milli / 1000.0,
                        pid=conn.pid,
                    )
                )
        for conn, what, pending in events:
            self._event(conn, what, pending)
        counters, self._counters = self._counters, {}
        return Batch(gpu_activities=tuple(acts), gpu_metrics=tuple(metrics), counters=counters)

    def tracer_status(self) -> dict[str, str]:
        """Session meta on the in-process tracers: ``gpu_tracer`` "on" when one started in
        some process (its hello carries the CUPTI versions), else "off" with
        ``gpu_tracer_reason``: the error a tracer sent, or why none was heard from."""
        if any("versions" in hello for hello in self.targets.values()):
            return {"gpu_tracer": "on", **self._hook_status()}
        if self.tracer_errors:
            reasons = list(dict.fromkeys(self.tracer_errors.values()))
            text = "; ".join(reasons)
            pids = ", ".join(str(p) for p in sorted(self.tracer_errors))
            return {"gpu_tracer": "off", "gpu_tracer_reason": f"{text} (pid {pids})"}
        if self.targets:
            return {
                "gpu_tracer": "off",
                "gpu_tracer_reason": ("a tracer connected but did not start and sent no reason"),
            }
        return {
            "gpu_tracer": "off",
            "gpu_tracer_reason": (
                "no process loaded the GPU tracer: the command is not a Python program, it "
                "replaced PYTHONPATH, or kubeprof is not importable there (see the "
                "kubeprof-gpu: lines it printed)"
            ),
        }

    def _hook_status(self) -> dict[str, str]:
        """``gpu_launch_hook``, only where some tracer ran the slower Python launch callback
        (the report shows it): why, and how to get the C hook (agent/gpu/tracer.py)."""
        python = {
            pid: h
            for pid, h in self.targets.items()
            if "versions" in h and h.get("hook") == "python"
        }
        if not python:
            return {}
        asked = all(h.get("config", {}).get("hook") == "python" for h in python.values())
        why = (
            "as KUBEPROF_GPU_HOOK=python asked"
            if asked
            else "the C launch hook (_launchhook) is not built: run scripts/build_launchhook.sh "
            "in a checkout, or pip install kubeprof again where a C compiler and the Python "
            "headers (python3-dev) exist"
        )
        pids = ", ".join(str(p) for p in sorted(python))
        return {"gpu_launch_hook": f"Python callback, slower per launch, in pid {pids}: {why}"}

    # ---- conversion ----
    def count(self, key: str, n: int = 1) -> None:
        """Add ``n`` to a counter of the next Batch."""
        if n:
            self._counters[key] = self._counters.get(key, 0) + n

    def _demangle(self, headers: list[dict[str, Any]]) -> None:
        new = [s for h in headers for s in h.get("strings", ()) if s.startswith("_Z")]
        new = [s for s in new if s not in self._demangled]
        if new:
            self._demangled.update(demangle_many(new))

    def _apply(
        self,
        conn: ConnState,
        header: dict[str, Any],
        records: dict[str, list[tuple[int, ...]]],
        out: list[GpuActivity],
    ) -> None:
        kind = header.get("t")
        if kind == "hello":
            # In a pod the tracer's own pid is its container's; the kernel's is the host's,
            # the one the agent's process records and CPU samples carry.
            conn.pid = conn.peer_pid or int(header.get("pid", 0))
            conn.tracer_pid = int(header.get("pid", 0))
            conn.host_tids.clear()
            self.targets[conn.pid] = {
                k: header[k]
                for k in ("argv", "ppid", "versions", "config", "skipped_cbids", "hook", "frames")
                if k in header
            }
            conn.strings.clear()
            conn.raw_stacks.clear()
            conn.stacks.clear()
            conn.bwd_stacks.clear()
            self.count("gpu_processes")
        base = int(header.get("strings_base", 0))
        strings = header.get("strings", [])
        if strings:
            del conn.strings[base:]
            conn.strings.extend(strings)
        sbase = int(header.get("stacks_base", 1))
        for i, frames in enumerate(header.get("stacks", [])):
            conn.raw_stacks[sbase + i] = frames
            conn.stacks.pop(sbase + i, None)
        self._update_target_counters(conn, header.get("counters", {}))
        for level, text in header.get("messages", ()):
            self.messages.append(f"pid {conn.pid}: {level}: {text}")
        if kind == "message":
            text = f"pid {header.get('pid', conn.pid)}: {header.get('text', '')}"
            self.messages.append(text)
            if header.get("level") == "error":
                self.count("gpu_tracer_errors")
                pid = int(header.get("pid", conn.pid) or 0)
                self.tracer_errors.setdefault(pid, str(header.get("text", "")))
        elif kind == "bye":
            conn.said_bye = True
        self.stacks.launches(conn, records.get("launch", ()))
        self.stacks.autograd(conn, records.get("autograd", ()))
        off = int(header.get("clock_offset_ns", 0))
        records = self._complete(records)
        self._kernels(conn, records.get("kernel", ()), out, off)
        self._copies(conn, records, out, off)
        self._syncs(conn, records.get("sync", ()), out, off)
        self._markers(conn, records.get("marker", ()), out, off)

    def _complete(
        self,
        records: dict[str, list[tuple[int, ...]]],
    ) -> dict[str, list[tuple[int, ...]]]:
        """The records minus those CUPTI handed over unfinished (a forced flush while the
        kernel still ran: start 0, or no end), counted as gpu_incomplete_records. Their
        timestamps are not times; one such row would have the whole batch refused."""
        out = dict(records)
        for kind in TIMED_KINDS:
            rows = records.get(kind)
            if rows:
                good = [r for r in rows if 0 < r[0] <= r[1]]
                if len(good) < len(rows):
                    self.count("gpu_incomplete_records", len(rows) - len(good))
                    out[kind] = good
        return out

    def _update_target_counters(self, conn: ConnState, counters: dict[str, int]) -> None:
        for key in ("dropped", "convert_errors", "sender_errors"):
            new = int(counters.get(key, 0))
            old = conn.counters.get(key, 0)
            if new > old:
                self.count(f"gpu_{key}", new - old)
        conn.counters.update({k: int(v) for k, v in counters.items()})

    def _kernels(self, conn: ConnState, rows: Any, out: list[GpuActivity], off: int) -> None:
        unattributed = 0
        for (
            start,
            end,
            device,
            corr,
            stream,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            regs,
            ssmem,
            dsmem,
            _graph,
            ctx,
            name,
        ) in rows:
            conn.ctx_device[ctx] = device
            raw = string(conn, name)
            stack = self.stacks.stack(conn, corr)
            if self.xla is not None:
                stack = self.stacks.xla_stack(conn, stream, raw, stack)
            if not stack:
                unattributed += 1
            out.append(
                _timed(
                    conn,
                    "kernel",
                    raw,
                    (start, end, off),
                    device,
                    corr,
                    stream,
                    stack,
                    demangled=self._demangled.get(raw, raw),
                    grid=(gx, gy, gz),
                    block=(bx, by, bz),
                    registers=regs,
                    shared_mem=ssmem + dsmem,
                )
            )
        self.count("gpu_kernels", len(rows))
        self.count("gpu_unattributed_kernels", unattributed)

    def _copies(
        self, conn: ConnState, records: dict[str, Any], out: list[GpuActivity], off: int
    ) -> None:
        for start, end, device, corr, stream, nbytes, copy_kind, src, dst in records.get(
            "memcpy", ()
        ):
            name = memcpy_name(copy_kind, src, dst)
            at, stack = (start, end, off), self.stacks.stack(conn, corr)
            out.append(_timed(conn, "memcpy", name, at, device, corr, stream, stack, bytes=nbytes))
        for start, end, device, corr, stream, nbytes in records.get("memset", ()):
            at, stack = (start, end, off), self.stacks.stack(conn, corr)
            out.append(
                _timed(conn, "memset", "memset", at, device, corr, stream, stack, bytes=nbytes)
            )

    def _syncs(self, conn: ConnState, rows: Any, out: list[GpuActivity], off: int) -> None:
        for start, end, ctx, corr, stream, sync_type in rows:
            name = _SYNC_TYPES.get(sync_type, f"sync {sync_type}")
            device = conn.ctx_device.get(ctx, -1)
            stack = self.stacks.stack(conn, corr) or self.stacks.enclosing_wait(conn, corr)
            out.append(_timed(conn, "sync", name, (start, end, off), device, corr, stream, stack))

    def _markers(self, conn: ConnState, rows: Any, out: list[GpuActivity], off: int) -> None:
        for ts, mid, flags, name, tid in rows:
            if flags & _MARKER_START:
                conn.open_markers[mid] = (ts + off, name, tid)
            elif flags & _MARKER_END and mid in conn.open_markers:
                start, name_id, tid0 = conn.open_markers.pop(mid)
                out.append(
                    GpuActivity(
                        kind="nvtx",
                        name=string(conn, name_id),
                        start_ns=start,
                        end_ns=ts + off,
                        device=-1,
                        pid=conn.pid,
                        correlation_id=0,
                        stream=tid0,
                    )
                )

    def _event(self, conn: ConnState, what: str, pending: int) -> None:
        if what == "bad_frame":
            self.count("gpu_bad_frames")
            self.messages.append(f"pid {conn.pid}: corrupt GPU trace stream; connection dropped")
        elif what == "closed" and not conn.closed:
            conn.closed = True
            if not conn.said_bye and conn.pid:
                self.count("gpu_target_exited_early")
                self.messages.append(
                    f"pid {conn.pid} exited before the GPU tracer's final flush; "
                    "records after its last flush are lost, the rest is kept"
                )
            if pending:
                self.count("gpu_partial_frames")
            conn.launches.clear()
            conn.bwd_seq.clear()
            conn.fwd_peeks.clear()
            conn.fwd_corrs.clear()


def _timed(
    conn: ConnState,
    kind: str,
    name: str,
    times: tuple[int, int, int],
    device: int,
    corr: int,
    stream: int,
    stack: Stack,
    **extra: Any,
) -> GpuActivity:
    """A record of ``conn``'s process; ``times``: (start, end, clock offset), the CUPTI
    timestamps moved to the host clock (kernel, memcpy, memset and sync rows all need it);
    its launch's time and thread when the tracer sent them."""
    start, end, off = times
    extra.update(launch_of(conn, corr))
    return GpuActivity(
        kind=kind,
        name=name,
        start_ns=start + off,
        end_ns=end + off,
        device=device,
        pid=conn.pid,
        correlation_id=corr,
        stream=stream,
        stack=stack,
        **extra,
    )
