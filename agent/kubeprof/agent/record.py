"""`kubeprof record`: run the collectors around a command or PID and store what they see.

Collectors are attached *before* the target starts, so its first seconds are not missed;
the store opens on a thread while the command starts (its imports alone take ~0.4 s).
The collector driver polls them into a `StoreSink`; this module adds what is particular
to a local recording: the session row, the child command, and when to stop. Whatever
ends the recording (duration, the command exiting, Ctrl-C, a collector failing), every
batch already collected is written before returning.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kubeprof.agent import collectors
from kubeprof.agent.driver import Collector, Driver
from kubeprof.model import Batch
from kubeprof.protocol.settings import (
    DEFAULT_CPU_HZ,
    DEFAULT_OFFCPU_EVERY,
    DEFAULT_OFFCPU_MIN_US,
)
from kubeprof.store_location import default_url, prepare_sqlite_path

if TYPE_CHECKING:  # imported when the command has started (_StoreOpener): ~0.4 s
    from kubeprof.agent.sinks import StoreSink
    from kubeprof.storage import Store


class RecordError(RuntimeError):
    """A problem that stops a recording, phrased as cause and fix on one line."""


@dataclass
class RecordOptions:
    """What the user asked `kubeprof record` to do."""

    command: Sequence[str] = ()
    pid: int | None = None
    duration_s: float | None = None
    hz: int = DEFAULT_CPU_HZ
    # Off-CPU probe knobs (--offcpu-min-us, --offcpu-every; every=0 turns it off).
    offcpu_min_us: int = DEFAULT_OFFCPU_MIN_US
    offcpu_every: int = DEFAULT_OFFCPU_EVERY
    name: str | None = None
    store_url: str | None = None
    cpu: bool = True
    gpu: bool = False
    nvml_interval_s: float = 0.1
    poll_interval_s: float = 0.5
    # Extra session meta from the user (`--label`, carbon settings), stored with the session.
    meta: dict[str, str] = field(default_factory=dict)
    # Collectors already built by the caller (tests); None = build them.
    sources: list[Collector] | None = None
    log: Callable[[str], None] = field(default=lambda msg: print(msg, file=sys.stderr))
    # What the recording is doing, for a terminal's status line: progress("preparing"),
    # progress("recording", elapsed_s, records_so_far) each poll, progress("storing").
    progress: Callable[..., None] | None = None


@dataclass
class RecordResult:
    """What a recording produced."""

    session_id: int
    session_name: str
    rows: int  # every row written (samples, processes, GPU records, metrics)
    records: int  # CPU samples + GPU activities
    exit_code: int  # the command's exit code (0 for --pid recordings)
    warnings: list[str]
    status: str = "completed"  # as stored: "completed", or "interrupted" after Ctrl-C


def default_name(opts: RecordOptions) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    if opts.command:
        return f"{Path(opts.command[0]).name}-{stamp}"
    return f"pid{opts.pid}-{stamp}"


def host_meta() -> dict[str, str]:
    """This machine's size, which the energy estimate needs (CCF counts per vCPU and GB)."""
    import psutil

    return {
        "host:vcpus": str(os.cpu_count() or 0),
        "host:memory_gb": f"{psutil.virtual_memory().total / 2**30:.1f}",
    }


def _start_collectors(
    opts: RecordOptions, gpu_socket: str | None
) -> tuple[dict[str, Collector], dict[str, str]]:
    """Create and attach collectors; returns them by name and env vars for a child command.

    CPU and GPU tracing were asked for explicitly, so either failing stops the recording;
    NVML only adds metrics, so without it the recording goes on.
    """
    names = (["cpu"] if opts.cpu else []) + (["gpu", "nvml"] if opts.gpu and gpu_socket else [])
    started = collectors.start(
        names,
        collectors.CollectorOptions(
            hz=opts.hz,
            nvml_interval_s=opts.nvml_interval_s,
            gpu_socket=gpu_socket,
            note=opts.log,
            offcpu_min_us=opts.offcpu_min_us,
            offcpu_every=opts.offcpu_every,
            quick_start=_quick_start(opts),
        ),
    )
    for required in ("cpu", "gpu"):
        if required in started.failed:
            started.stop_all()
            raise RecordError(str(started.failed[required])) from started.failed[required]
    if "nvml" in started.failed:
        opts.log(f"kubeprof: NVML metrics off: {started.failed['nvml']}")
    return started.running, started.env


class _Interrupt:
    """First Ctrl-C (SIGINT) or SIGTERM ends the recording gracefully; a second Ctrl-C aborts.

    A flag instead of KeyboardInterrupt: the exception could land anywhere (inside a
    store write, say), while the flag is only read between polls, so the final drain and
    the last writes always run.
    """

    def __init__(self) -> None:
        self.event = threading.Event()
        self.wake = threading.Event()  # ends the driver's wait: Ctrl-C, or the command exited
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
        self.wake.set()

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


@dataclass
class _Until:
    """The recording's stop condition, checked by the driver between polls.

    It stops on Ctrl-C, when the command exits, when the --pid target is gone, or at the
    deadline, and remembers which, because that decides the exit code and the status.
    """

    interrupted: threading.Event
    child: subprocess.Popen[bytes] | None
    target: int
    deadline_ns: int | None
    reason: str = ""  # "interrupted", "exited", "gone", "deadline" once stopped

    def __call__(self) -> bool:
        if self.interrupted.is_set():
            self.reason = "interrupted"
        elif self.child is not None and self.child.poll() is not None:
            self.reason = "exited"
        elif self.child is None and not Path(f"/proc/{self.target}").exists():
            self.reason = "gone"
        elif self.deadline_ns is not None and time.monotonic_ns() >= self.deadline_ns:
            self.reason = "deadline"
        return bool(self.reason)

    def exit_code(self) -> int:
        """The command's exit code; 0 when the deadline cut it short or for --pid."""
        if self.child is None or self.reason == "deadline":
            return 0
        return self.child.returncode if self.child.returncode is not None else 0


def record(opts: RecordOptions) -> RecordResult:
    """Run one recording to its end and return what was stored."""
    with _Interrupt() as interrupt:
        return _record(opts, interrupt.event, interrupt.wake)


def _wake_on_exit(child: subprocess.Popen[bytes], wake: threading.Event) -> None:
    """Set `wake` when the command exits, so the recording stops then and not up to a poll
    interval later (the whole interval was added to every short command's wall time)."""

    def watch() -> None:
        try:
            os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # leaves it to Popen
        except OSError:
            return  # cannot wait (reaped already): the driver's polls see the exit
        wake.set()

    threading.Thread(target=watch, name="kubeprof-child-exit", daemon=True).start()


def _record(
    opts: RecordOptions, interrupted: threading.Event, wake: threading.Event
) -> RecordResult:
    """`record` inside the Ctrl-C flag; `wake` (set by Ctrl-C and by the command's exit)
    ends the driver's wait between polls."""
    if not opts.command and opts.pid is None:
        raise RecordError("nothing to record: give --pid PID or -- COMMAND [ARGS...]")
    if opts.pid is not None and not Path(f"/proc/{opts.pid}").exists():
        raise RecordError(
            f"no process with PID {opts.pid}: check the PID with `ps` "
            "(it must run on this machine, in this PID namespace)"
        )
    # An SQLite path's mistakes before anything starts; the rest when the store opens.
    problem = prepare_sqlite_path(opts.store_url or default_url())
    if problem:
        raise RecordError(problem)
    name = opts.name or default_name(opts)
    tmp = tempfile.mkdtemp(prefix="kubeprof-")
    gpu_socket = os.path.join(tmp, "gpu.sock") if opts.gpu else None
    progress = opts.progress or (lambda *_: None)
    progress("preparing")
    if opts.sources is not None:
        running = _named(opts.sources)
        env: dict[str, str] = {}
    else:
        try:
            running, env = _start_collectors(opts, gpu_socket)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    start_ns = time.monotonic_ns()
    meta = {**opts.meta, **host_meta(), "cpu": str(opts.cpu), "gpu": str(opts.gpu)}
    for c in running.values():  # which CPU sampler ran: "bpf" or "py-spy" (no BPF there)
        source = getattr(c, "cpu_source", "")
        if source:
            meta["cpu_source"] = str(source)
    driver = Driver(running, _Unopened(), interval_s=opts.poll_interval_s)
    opener: _StoreOpener | None = None
    child: subprocess.Popen[bytes] | None = None
    store: Store | None = None
    session_id: int | None = None
    sink: StoreSink | None = None
    exit_code = 0
    status = "completed"

    def stop_child() -> None:
        if child is not None and child.poll() is None:
            # Ctrl-C on a terminal reached the command too (one process group): let it end
            # on that one first; a second SIGINT would land in its own clean-up code
            _stop_child(child, _CTRL_C_GRACE_S if interrupted.is_set() else 0.0)

    try:
        if opts.command:
            try:
                child = subprocess.Popen(list(opts.command), env={**os.environ, **env})
            except OSError as exc:
                raise RecordError(
                    f"cannot start {opts.command[0]!r}: {exc.strerror}; "
                    "check the command name and PATH"
                ) from exc
            target = child.pid
            _wake_on_exit(child, wake)
        else:
            target = int(opts.pid or 0)
        refused = driver.attach(target)  # first: the import below would slow it (GIL)
        if refused:
            raise RecordError(str(next(iter(refused.values()))))
        # SQLAlchemy's import and the store's open while the command runs (a store that
        # does not open stops the command here, with the store's error)
        opener = _StoreOpener(opts.store_url)
        opener.wait(lambda: progress("recording", (time.monotonic_ns() - start_ns) / 1e9, 0))
        store, session_id, name, sink = _open_session(
            opener, driver, opts, name, start_ns, meta, tmp
        )
        written = sink
        until = _Until(
            interrupted,
            child,
            target,
            start_ns + int(opts.duration_s * 1e9) if opts.duration_s else None,
        )

        def should_stop() -> bool:
            progress("recording", (time.monotonic_ns() - start_ns) / 1e9, written.records)
            return until()

        driver.run(should_stop, wait=wake.wait, on_stop=stop_child)
        exit_code = until.exit_code()
        if until.reason == "interrupted":
            status = "interrupted"
            opts.log("kubeprof: interrupted; saving what was collected")
    except KeyboardInterrupt:
        status = "interrupted"
        opts.log("kubeprof: interrupted again; saving what was collected")
    except RecordError:
        status = "failed"
        if session_id is None:  # the command did not start: the session says so anyway
            with contextlib.suppress(Exception):
                opener = opener or _StoreOpener(opts.store_url)
                store, session_id, name, sink = _open_session(
                    opener, driver, opts, name, start_ns, meta, tmp
                )
        raise
    finally:
        progress("storing")
        stop_child()  # before the drain: a GPU tracer in the command flushes as it exits
        driver.close()  # a no-op when the loop ran; else stops the collectors started
        if opener is not None:
            opener.close()  # a store that never got its session (the start failed)
        end_ns = time.monotonic_ns()
        warnings = list(driver.notes)
        if sink is not None and sink.kept_in is not None:
            warnings.append(
                f"the store could not be written; data kept in {sink.kept_in} "
                "(gzip JSON batches in the cluster agent's format)"
            )
        if sink is not None and sink.refused:
            warnings.append(
                f"{len(sink.refused)} record(s) left out, the store refused their values "
                f"(the rest stored): {sink.refused[0]}"
            )
        end_meta = {
            "exit_code": str(exit_code),
            **_tracer_status(running.values()),
            **_sampler_meta(running.values()),
        }
        if end_meta.get("gpu_tracer") == "off":
            warnings.append(f"GPU tracing was off: {end_meta.get('gpu_tracer_reason', '')}")
        if end_meta.get("gpu_launch_hook"):  # stored too: the report's header shows it
            warnings.append(f"GPU launches traced by the {end_meta['gpu_launch_hook']}")
        if store is not None and session_id is not None:
            _finish(store, session_id, status, end_ns, end_meta, warnings)
        if sink is None or sink.kept_in is None:  # else it holds the unsaved batches
            shutil.rmtree(tmp, ignore_errors=True)
    assert sink is not None and session_id is not None  # else the store's error was raised
    if child is not None and sink.records == 0 and child.returncode is not None and not warnings:
        warnings.append(
            f"the command exited (code {child.returncode}) before any sample was "
            "taken; profile a longer-running command or use --pid"
        )
    return RecordResult(session_id, name, sink.rows, sink.records, exit_code, warnings, status)


def _open_session(
    opener: _StoreOpener,
    driver: Driver,
    opts: RecordOptions,
    name: str,
    start_ns: int,
    meta: dict[str, str],
    tmp: str,
) -> tuple[Store, int, str, StoreSink]:
    """The store (waited for), the session's row and the sink the driver writes into from
    now on; returns (store, session id, the name it got, sink)."""
    from kubeprof.agent.sinks import StoreSink
    from kubeprof.storage import sessions

    store = opener.result()
    command = shlex.join(opts.command) if opts.command else f"--pid {opts.pid}"
    session_id = store.create_session(
        name, command=command, hz=opts.hz, start_ns=start_ns, meta=meta
    )
    with store.engine.connect() as conn:  # a taken name was suffixed ("quick" -> "quick-2")
        name = sessions.name_of(conn, session_id)
    sink = StoreSink(store, session_id, fallback=Path(tmp) / "unsaved-batches", log=opts.log)
    driver.sink = sink
    return store, session_id, name, sink


def _finish(
    store: Store,
    session_id: int,
    status: str,
    end_ns: int,
    meta: dict[str, str],
    warnings: list[str],
) -> None:
    """Mark the session ended and close the store; a store gone at the very end is a warning."""
    from kubeprof.storage import StoreError

    try:
        store.finish_session(session_id, status=status, end_ns=end_ns, meta=meta)
    except StoreError as exc:  # pragma: no cover - store vanished at the very end
        warnings.append(str(exc))
    store.close()


class _Unopened:
    """The driver's sink until the store is open: nothing is polled before then, and a
    recording whose store fails to open keeps nothing (its error is what the user gets)."""

    records = rows = 0
    kept_in = None

    def write(self, batch: Batch) -> None:
        """Nothing to keep: the store did not open."""

    def close(self) -> None:
        """Nothing to flush."""


class _StoreOpener:
    """Opens the store on a thread (importing SQLAlchemy and Alembic alone takes ~0.4 s):
    the command starts meanwhile. `result()` waits and returns the store or raises its
    error; `close()` closes a store nobody took."""

    def __init__(self, url: str | None) -> None:
        self._url = url
        self._store: Store | None = None
        self._error: BaseException | None = None
        self._taken = False
        self._thread = threading.Thread(target=self._open, name="kubeprof-store", daemon=True)
        self._thread.start()

    def _open(self) -> None:
        try:
            from kubeprof.storage import Store

            self._store = Store.open(self._url)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            self._error = exc

    def wait(self, tick: Callable[[], None], every_s: float = 0.5) -> None:
        """Wait for the open, calling `tick` every `every_s` meanwhile (the progress line
        keeps counting while a loaded machine imports SQLAlchemy)."""
        while self._thread.is_alive():
            tick()
            self._thread.join(every_s)

    def result(self) -> Store:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._store is not None
        self._taken = True
        return self._store

    def close(self) -> None:
        self._thread.join()
        if self._store is not None and not self._taken:
            self._store.close()


def _tracer_status(collectors: Iterable[Collector]) -> dict[str, str]:
    """The GPU receiver's word on its tracers (``gpu_tracer``, ``gpu_tracer_reason``), read
    after the drain, so a report can say that GPU tracing was off and why."""
    out: dict[str, str] = {}
    for c in collectors:
        status = getattr(c, "tracer_status", None)
        if callable(status):
            try:
                out.update({str(k): str(v) for k, v in status().items()})
            except Exception as exc:  # noqa: BLE001 - the recording is saved regardless
                out.update({"gpu_tracer": "off", "gpu_tracer_reason": f"status unknown: {exc}"})
    return out


def _quick_start(opts: RecordOptions) -> bool:
    """Start at once with py-spy covering the BPF compile: for Python targets only (py-spy
    sees nothing else), a command that starts Python or a running Python process."""
    from kubeprof.agent.cpu.handover import pid_runs_python, runs_python

    if opts.command:
        return runs_python(opts.command)
    return opts.pid is not None and pid_runs_python(int(opts.pid))


def _sampler_meta(collectors: Iterable[Collector]) -> dict[str, str]:
    """Which CPU sampler covered the run, read after the drain: the quick start's py-spy
    then BPF (``cpu_source``, ``cpu_handover_s``; cpu/handover.py)."""
    out: dict[str, str] = {}
    for c in collectors:
        meta = getattr(c, "session_meta", None)
        if callable(meta):
            out.update({str(k): str(v) for k, v in meta().items()})
    return out


def _named(sources: list[Collector]) -> dict[str, Collector]:
    """Collectors handed in by the caller, named by type (numbered when a type repeats)."""
    out: dict[str, Collector] = {}
    for s in sources:
        base = type(s).__name__
        key, n = base, 1
        while key in out:
            n += 1
            key = f"{base}-{n}"
        out[key] = s
    return out


_CTRL_C_GRACE_S = 2.0  # after Ctrl-C, how long the command may take to end on its own


def _stop_child(child: subprocess.Popen[bytes], grace_s: float = 0.0) -> None:
    """Ask the command to stop (SIGINT, then SIGTERM, then SIGKILL), after ``grace_s`` for
    it to end on its own."""
    if grace_s > 0:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=grace_s)
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
