"""`kubeprof record`: run the collectors around a command or PID and store what they see.

Collectors are attached *before* the target starts, so its first seconds are not missed.
Whatever ends the recording (duration, the command exiting, Ctrl-C, a collector failing),
every batch already collected is written before returning.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from kubeprof.model import Batch
from kubeprof.storage import Store, StoreError


class RecordError(RuntimeError):
    """A problem that stops a recording, phrased as cause and fix on one line."""


class Source(Protocol):
    """What the recorder needs of a collector (CPU sampler, GPU receiver, NVML sampler)."""

    def poll(self) -> Batch: ...

    def stop(self) -> Batch: ...


@dataclass
class RecordOptions:
    """What the user asked `kubeprof record` to do."""

    command: Sequence[str] = ()
    pid: int | None = None
    duration_s: float | None = None
    hz: int = 99
    name: str | None = None
    store_url: str | None = None
    cpu: bool = True
    gpu: bool = False
    nvml_interval_s: float = 0.1
    poll_interval_s: float = 0.5
    # Collectors already built by the caller (tests, the cluster agent); None = build them.
    sources: list[Source] | None = None
    log: Callable[[str], None] = field(default=lambda msg: print(msg, file=sys.stderr))


@dataclass
class RecordResult:
    """What a recording produced."""

    session_id: int
    session_name: str
    rows: int  # every row written (samples, processes, GPU records, metrics)
    records: int  # CPU samples + GPU activities
    exit_code: int  # the command's exit code (0 for --pid recordings)
    warnings: list[str]


def default_name(opts: RecordOptions) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    if opts.command:
        return f"{Path(opts.command[0]).name}-{stamp}"
    return f"pid{opts.pid}-{stamp}"


class _Writer:
    """Writes batches to the store; keeps them in memory while the store fails."""

    def __init__(self, store: Store, session_id: int, log: Callable[[str], None]) -> None:
        self.store, self.session_id, self.log = store, session_id, log
        self.pending: list[Batch] = []
        self.rows = 0
        self.records = 0  # CPU samples + GPU activities: what a profile is made of

    def add(self, batch: Batch) -> None:
        if batch.samples or batch.gpu_activities or batch.gpu_metrics or batch.processes \
                or batch.counters:
            self.pending.append(batch)
        self.flush()

    def flush(self) -> bool:
        while self.pending:
            try:
                self.rows += self.store.write_batch(self.session_id, self.pending[0])
                self.records += len(self.pending[0].samples) + len(
                    self.pending[0].gpu_activities)
            except Exception as exc:  # noqa: BLE001 - keep the data, report the cause
                self.log(f"kubeprof: store write failed, keeping data in memory: {exc}")
                return False
            self.pending.pop(0)
        return True


def _start_sources(opts: RecordOptions, gpu_socket: str | None) -> tuple[list[Source], dict]:
    """Create and attach collectors; returns them and env vars for a child command."""
    sources: list[Source] = []
    env: dict[str, str] = {}
    if opts.cpu:
        from kubeprof.agent.cpu.collector import CollectorError
        from kubeprof.agent.cpu.pyspy_collector import open_cpu_collector

        try:  # BPF, else py-spy (machines/pods without BPF)
            sources.append(open_cpu_collector(opts.hz, opts.log))
        except CollectorError as exc:
            raise RecordError(str(exc)) from exc
    if opts.gpu and gpu_socket:
        from kubeprof.agent.gpu.inject import tracer_env
        from kubeprof.agent.gpu.receiver import GpuReceiver

        rx = GpuReceiver(gpu_socket)
        rx.start()
        sources.append(rx)
        env.update(tracer_env(gpu_socket))
        try:
            from kubeprof.agent.gpu.nvml import NvmlSampler

            nvml = NvmlSampler(interval_s=opts.nvml_interval_s)
            nvml.start()
            sources.append(nvml)
        except Exception as exc:  # noqa: BLE001 - NVML is optional: say so and go on
            opts.log(f"kubeprof: NVML metrics off: {exc}")
    return sources, env


class _Interrupt:
    """First Ctrl-C (SIGINT) or SIGTERM ends the recording gracefully; a second Ctrl-C aborts.

    A flag instead of KeyboardInterrupt: the exception could land anywhere (inside a
    store write, say), while the flag is only read between polls, so the final drain and
    the last writes always run.
    """

    def __init__(self) -> None:
        self.event = threading.Event()
        self._old: dict[int, object] = {}

    def __enter__(self) -> _Interrupt:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, _frame: object) -> None:
        if self.event.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.event.set()

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def record(opts: RecordOptions) -> RecordResult:
    """Run one recording to its end and return what was stored."""
    with _Interrupt() as interrupt:
        return _record(opts, interrupt.event)


def _record(opts: RecordOptions, interrupted: threading.Event) -> RecordResult:
    if not opts.command and opts.pid is None:
        raise RecordError("nothing to record: give --pid PID or -- COMMAND [ARGS...]")
    if opts.pid is not None and not Path(f"/proc/{opts.pid}").exists():
        raise RecordError(f"no process with PID {opts.pid}: check the PID with `ps` "
                          "(it must run on this machine, in this PID namespace)")
    store = Store.open(opts.store_url)  # fail on a bad store before anything starts
    name = opts.name or default_name(opts)
    command = shlex.join(opts.command) if opts.command else f"--pid {opts.pid}"
    tmp = tempfile.mkdtemp(prefix="kubeprof-")
    gpu_socket = os.path.join(tmp, "gpu.sock") if opts.gpu else None
    if opts.sources is not None:
        sources, env = list(opts.sources), dict[str, str]()
    else:
        sources, env = _start_sources(opts, gpu_socket)
    start_ns = time.monotonic_ns()
    meta = {"cpu": str(opts.cpu), "gpu": str(opts.gpu)}
    for s in sources:  # which CPU sampler ran: "bpf" or "py-spy" (no BPF there)
        if hasattr(s, "cpu_source"):
            meta["cpu_source"] = s.cpu_source
    session_id = store.create_session(name, command=command, hz=opts.hz, start_ns=start_ns,
                                      meta=meta)
    writer = _Writer(store, session_id, opts.log)
    warnings: list[str] = []
    child: subprocess.Popen[bytes] | None = None
    exit_code = 0
    status = "completed"
    try:
        if opts.command:
            try:
                child = subprocess.Popen(list(opts.command), env={**os.environ, **env})
            except OSError as exc:
                raise RecordError(f"cannot start {opts.command[0]!r}: {exc.strerror}; "
                                  "check the command name and PATH") from exc
            target = child.pid
        else:
            target = int(opts.pid or 0)
        for s in sources:
            if hasattr(s, "add_target"):
                s.add_target(target)
        exit_code = _loop(opts, sources, writer, child, target, start_ns, interrupted)
        if interrupted.is_set():
            status = "interrupted"
            opts.log("kubeprof: interrupted; saving what was collected")
    except KeyboardInterrupt:
        status = "interrupted"
        opts.log("kubeprof: interrupted again; saving what was collected")
    except RecordError:
        status = "failed"
        raise
    finally:
        for s in sources:
            try:
                writer.add(s.stop())
            except Exception as exc:  # noqa: BLE001 - one collector must not lose the rest
                warnings.append(f"{type(s).__name__} failed while stopping: {exc}")
            # Collectors' own one-line notes (CPU: target exited at once; GPU: tracer errors).
            for attr in ("warnings", "messages"):
                warnings.extend(str(m) for m in getattr(s, attr, ()) or ())
        end_ns = time.monotonic_ns()
        if child is not None and child.poll() is None:
            _stop_child(child)
        if not writer.flush():
            spool = _spool(writer.pending, tmp)
            warnings.append(f"the store could not be written; data kept in {spool}")
        try:
            store.finish_session(session_id, status=status, end_ns=end_ns,
                                 meta={"exit_code": str(exit_code)})
        except StoreError as exc:  # pragma: no cover - store vanished at the very end
            warnings.append(str(exc))
        store.close()
    if child is not None and writer.records == 0 and child.returncode is not None \
            and not warnings:
        warnings.append(f"the command exited (code {child.returncode}) before any sample was "
                        "taken; profile a longer-running command or use --pid")
    return RecordResult(session_id, name, writer.rows, writer.records, exit_code, warnings)


def _loop(opts: RecordOptions, sources: list[Source], writer: _Writer,
          child: subprocess.Popen[bytes] | None, target: int, start_ns: int,
          interrupted: threading.Event) -> int:
    deadline = start_ns + int(opts.duration_s * 1e9) if opts.duration_s else None
    while True:
        if interrupted.wait(opts.poll_interval_s):
            if child is not None and child.poll() is None:
                _stop_child(child)
            return child.returncode if child is not None else 0
        for s in sources:
            writer.add(s.poll())
        if child is not None and child.poll() is not None:
            return child.returncode
        if child is None and not Path(f"/proc/{target}").exists():
            return 0
        if deadline is not None and time.monotonic_ns() >= deadline:
            if child is not None:
                _stop_child(child)
            return 0


def _stop_child(child: subprocess.Popen[bytes]) -> None:
    """Ask the command to stop (SIGINT, then SIGTERM, then SIGKILL)."""
    for sig, wait in ((signal.SIGINT, 5.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        if child.poll() is not None:
            return
        try:
            child.send_signal(sig)
            child.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return


def _spool(batches: list[Batch], folder: str) -> str:
    """Last resort when the store cannot be written: pickle the batches to a file."""
    import pickle

    path = os.path.join(folder, "unsaved-batches.pickle")
    with open(path, "wb") as fh:
        pickle.dump(batches, fh)
    return path
