"""The dormant tracer's switch: a unix socket per process that the node agent writes to.

An injected pod (``KUBEPROF_GPU_DORMANT=1``) starts every Python process with a
``DormantTracer``: no CUPTI import, no subscription, one thread blocked in ``accept()`` on
``<socket folder>/ctl/<pod uid>/<pid>.sock``. The node agent finds the sockets of a
session's selected pods by their pod UID and sends one line per connection:

* ``on``  -> the tracer subscribes to CUPTI and streams to the agent's ``gpu.sock``;
* ``off`` -> it flushes, unsubscribes and hangs up (CUPTI is free for other profilers);
* ``status`` -> ``dormant`` / ``on`` / ``unsupported: <why>``.

Each answer is one line: ``ok on``, ``ok off`` or ``error: <why>``. Where tracing cannot work
(no driver or GPU, no libcupti, another libcupti major already loaded, an unsupported Python)
the reason is printed once on the process's stderr (the pod's log) and returned to the agent,
which puts it into the session's status; the workload runs on untouched.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV_DORMANT = "KUBEPROF_GPU_DORMANT"
ENV_POD_UID = "KUBEPROF_POD_UID"
SUPPORTED_PYTHON = ((3, 10), (3, 13))  # inclusive; what cupti-python ships wheels for
MAX_LINE = 64


def control_dir(gpu_socket: str, pod_uid: str) -> Path:
    """Where a pod's processes put their control sockets (shared with the node agent)."""
    return Path(gpu_socket).parent / "ctl" / (pod_uid or "no-pod-uid")


def python_unsupported(version: tuple[int, int] | None = None) -> str:
    """Why this interpreter cannot be traced, or ""."""
    v = version or (sys.version_info[0], sys.version_info[1])
    lo, hi = SUPPORTED_PYTHON
    if not lo <= v <= hi:
        return (
            f"Python {v[0]}.{v[1]} is not supported (cupti-python has builds for "
            f"{lo[0]}.{lo[1]}-{hi[0]}.{hi[1]})"
        )
    return ""


FORCE_EVERY = 10  # every 10th periodic flush is forced (see Flusher)


class Flusher:
    """While a switched-on tracer runs: hand CUPTI's partly filled buffers over periodically.

    CUPTI delivers a buffer by itself only once it is full (8 MB: minutes of a sparse
    workload; on the H200 a whole 10 s session arrived at ``off`` in one batch), so the node
    agent would see nothing while the session runs. Every flush period this asks for the
    buffers whose records are all complete; every ``FORCE_EVERY``-th time it forces them (a
    GPU that never idles has no such buffer), handing over records of kernels still running
    with no timestamps, which the receiver drops and counts.
    """

    def __init__(self, tracer: Any, period_s: float, force_every: int = FORCE_EVERY) -> None:
        self.tracer, self.period_s, self.force_every = tracer, period_s, force_every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubeprof-gpu-flush", daemon=True)

    def start(self) -> Flusher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(2.0)

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(self.period_s):
            n += 1
            with contextlib.suppress(Exception):  # never into the workload
                if n % self.force_every == 0:
                    self.tracer.flush()
                else:
                    self.tracer.flush_completed()


class DormantTracer:
    """A tracer that exists but does nothing until switched on; never raises into the host.

    ``make`` builds and starts a live tracer (a ``CuptiTracer`` with its ``Sender``) and
    raises with a one-line reason when it cannot; it is injectable so tests use the fake
    CUPTI.
    """

    def __init__(self, make: Callable[[], Any], say: Callable[[str], None]) -> None:
        self._make = make
        self._say = say
        self._lock = threading.Lock()
        self.tracer: Any = None
        self.flusher: Flusher | None = None
        self.unsupported = ""
        self.switches = 0

    @property
    def state(self) -> str:
        if self.unsupported:
            return f"unsupported: {self.unsupported}"
        return "on" if self.tracer is not None else "dormant"

    def on(self) -> str:
        with self._lock:
            if self.unsupported:
                return f"error: {self.unsupported}"
            if self.tracer is not None:
                return "ok on"
            try:
                self.tracer = self._make()
            except Exception as exc:  # noqa: BLE001 - the workload must run on
                self.unsupported = str(exc) or type(exc).__name__
                self._say(f"GPU tracing unavailable: {self.unsupported}")  # once: then sticky
                return f"error: {self.unsupported}"
            self.switches += 1
            self.flusher = _start_flusher(self.tracer)
            return "ok on"

    def off(self) -> str:
        with self._lock:
            tracer, self.tracer = self.tracer, None
            flusher, self.flusher = self.flusher, None
        if flusher is not None:
            flusher.stop()
        if tracer is not None:
            with contextlib.suppress(Exception):
                tracer.stop()
        return "ok off"

    def handle(self, line: str) -> str:
        cmd = line.strip().lower()
        if cmd == "on":
            return self.on()
        if cmd == "off":
            return self.off()
        if cmd == "status":
            return self.state
        return f"error: unknown command {cmd[:20]!r}; send on, off or status"


class ControlServer:
    """Accepts the agent's one-line commands on a unix socket, on a daemon thread."""

    def __init__(self, path: Path, dormant: DormantTracer) -> None:
        self.path = path
        self.dormant = dormant
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve; OSError (read-only or missing folder) is the caller's to report."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # a stale socket of an earlier process with our pid
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(self.path))
            os.chmod(self.path, 0o600)  # only the node agent (root) and this user may switch
            sock.listen(4)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="kubeprof-gpu-ctl", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        sock = self._sock
        while sock is not None:
            try:
                conn, _ = sock.accept()
            except OSError:
                return  # closed
            with conn, contextlib.suppress(OSError):
                conn.settimeout(2.0)
                data = conn.recv(MAX_LINE)
                conn.sendall((self.dormant.handle(data.decode("ascii", "replace")) + "\n").encode())

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        with contextlib.suppress(OSError):
            self.path.unlink()


def _start_flusher(tracer: Any) -> Flusher | None:
    """A Flusher at the tracer's flush period, for tracers that can flush (CuptiTracer)."""
    config = getattr(tracer, "config", None)
    if not hasattr(tracer, "flush_completed") or config is None:
        return None
    return Flusher(tracer, max(0.05, config.flush_ms / 1000.0)).start()


def switch(path: str | Path, command: str, timeout_s: float = 5.0) -> str:
    """The node agent's side: send ``on``/``off``/``status``, return the answer line.

    OSError when no process listens there (it exited; the caller drops the socket).
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(str(path))
        s.sendall(command.encode() + b"\n")
        return s.recv(4096).decode("utf-8", "replace").strip()


def pod_sockets(gpu_socket: str, pod_uid: str) -> list[Path]:
    """The control sockets of one pod's traced processes, for the node agent."""
    d = control_dir(gpu_socket, pod_uid)
    return sorted(d.glob("*.sock")) if d.is_dir() else []
