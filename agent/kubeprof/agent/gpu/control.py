"""The dormant tracer's switch: a unix socket per process that the node agent writes to.

An injected pod (``KUBEPROF_GPU_DORMANT=1``) starts every Python process with a
``DormantTracer``: no CUPTI import, no subscription, one thread blocked in ``accept()`` on
``$KUBEPROF_GPU_CTL_DIR/<pid>-<random>.sock`` (the pod's own emptyDir; the random part keeps
containers with their own pid namespaces apart). The node agent reaches that folder through
``/proc/<pid>/root`` of the pod's processes, checks who answers (SO_PEERCRED) and sends one
line per connection:

* ``on <session>``  -> the tracer subscribes to CUPTI and streams to that session's receiver
  ``<dir of KUBEPROF_GPU_SOCKET>/<session>.sock``;
* ``off <session>`` -> that session lets go; when no session holds the tracer any more it
  flushes, unsubscribes and hangs up (CUPTI is free for other profilers);
* ``status`` -> ``dormant`` / ``on <session>[ +N]`` / ``unsupported: <why>``.

Sessions are reference-counted: a second session switching a pod on adds a holder, and its
``off`` never stops a tracer the first still holds. One process streams to one receiver,
the first holder's; when that one lets go first the stream moves to the next holder.
``on``/``off`` without a session name mean the receiver at ``KUBEPROF_GPU_SOCKET`` itself.

Each answer is one line: ``ok on``, ``ok on, streaming to <session>``, ``ok off`` or
``error: <why>``. Where tracing cannot work (no driver or GPU, no libcupti, another libcupti
major already loaded, an unsupported Python) the reason is printed once on the process's
stderr (the pod's log) and returned to the agent, which ships it to the session's status;
the workload runs on untouched.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV_POD_UID = "KUBEPROF_POD_UID"
ENV_CTL_DIR = "KUBEPROF_GPU_CTL_DIR"
SUPPORTED_PYTHON = ((3, 10), (3, 13))  # inclusive; what cupti-python ships wheels for
MAX_LINE = 320  # "off " + a session name
# A session's receiver name: no path separators, no dot files, fits a socket path.
SESSION_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,79}$")
# The agent is root without CAP_DAC_OVERRIDE: it can open only what its mode bits allow.
# The folder is the pod's own emptyDir, so no other pod can reach the socket anyway.
SOCKET_MODE = 0o666


def control_dir(gpu_socket: str, pod_uid: str, env: dict[str, str] | None = None) -> Path:
    """Where this process puts its control socket: ``$KUBEPROF_GPU_CTL_DIR`` (an injected
    pod's own emptyDir), else ``<socket dir>/ctl/<pod uid>`` (by hand, outside a cluster)."""
    given = (os.environ if env is None else env).get(ENV_CTL_DIR, "")
    if given:
        return Path(given)
    return Path(gpu_socket).parent / "ctl" / (pod_uid or "no-pod-uid")


def socket_name(pid: int | None = None) -> str:
    """``<pid>-<8 hex>.sock``: containers of one pod share the folder but not pid numbers."""
    return f"{os.getpid() if pid is None else pid}-{secrets.token_hex(4)}.sock"


def receiver_for(gpu_socket: str, session: str) -> str:
    """The receiver socket of ``session`` (next to KUBEPROF_GPU_SOCKET); ValueError if the
    name could leave that folder."""
    if not session:
        return gpu_socket
    if not SESSION_NAME.match(session):
        raise ValueError(f"bad session name {session[:40]!r}")
    return str(Path(gpu_socket).parent / f"{session}.sock")


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

    ``make(receiver)`` builds and starts a live tracer (a ``CuptiTracer`` with its
    ``Sender``) streaming to that socket path, and raises with a one-line reason when it
    cannot; it is injectable so tests use the fake CUPTI. ``holders`` are the sessions that
    switched it on, in order; the first one receives the stream.
    """

    def __init__(
        self, make: Callable[[str], Any], say: Callable[[str], None], gpu_socket: str = ""
    ) -> None:
        self._make = make
        self._say = say
        self.gpu_socket = gpu_socket  # KUBEPROF_GPU_SOCKET: its folder holds the receivers
        self._lock = threading.Lock()
        self.tracer: Any = None
        self.flusher: Flusher | None = None
        self.holders: dict[str, str] = {}  # session -> its receiver path (insertion order)
        self.streaming_to = ""  # the holder whose receiver gets the stream
        self.unsupported = ""
        self.switches = 0

    @property
    def state(self) -> str:
        if self.unsupported:
            return f"unsupported: {self.unsupported}"
        if self.tracer is None:
            return "dormant"
        more = len(self.holders) - 1
        text = f"on {self.streaming_to}" if self.streaming_to else "on"
        return f"{text} +{more}" if more > 0 else text

    def _start(self, session: str) -> str:
        """Start streaming to ``session``'s receiver (lock held); "" or the error line."""
        try:
            self.tracer = self._make(self.holders[session])
        except Exception as exc:  # noqa: BLE001 - the workload must run on
            self.unsupported = str(exc) or type(exc).__name__
            self._say(f"GPU tracing unavailable: {self.unsupported}")  # once: then sticky
            self.holders.clear()
            self.streaming_to = ""
            return f"error: {self.unsupported}"
        self.streaming_to = session
        self.switches += 1
        self.flusher = _start_flusher(self.tracer)
        return ""

    def on(self, session: str = "") -> str:
        with self._lock:
            if self.unsupported:
                return f"error: {self.unsupported}"
            try:
                receiver = receiver_for(self.gpu_socket, session)
            except ValueError as exc:
                return f"error: {exc}"
            self.holders.setdefault(session, receiver)
            if self.tracer is None:
                error = self._start(session)
                if error:
                    return error
            if self.streaming_to == session:
                return "ok on"
            return f"ok on, streaming to {self.streaming_to or '-'}"

    def off(self, session: str = "") -> str:
        """``session`` lets go; the tracer stops only when no session holds it."""
        with self._lock:
            self.holders.pop(session, None)
            if self.tracer is None or self.streaming_to != session:
                return "ok off"  # not held by it, or another holder's stream goes on
            tracer, self.tracer, self.streaming_to = self.tracer, None, ""
            flusher, self.flusher = self.flusher, None
        if flusher is not None:
            flusher.stop()
        with contextlib.suppress(Exception):
            tracer.stop()
        with self._lock:  # the stream moves to the next holder, if any is left
            nxt = next(iter(self.holders), None)
            if nxt is not None and self.tracer is None and not self.unsupported:
                error = self._start(nxt)
                if error:
                    return f"ok off ({error})"
                return f"ok off, streaming to {nxt}"
        return "ok off"

    def stop_all(self) -> None:
        """Interpreter exit: flush whatever stream is on, whoever holds it."""
        with self._lock:
            tracer, self.tracer = self.tracer, None
            flusher, self.flusher = self.flusher, None
        if flusher is not None:
            flusher.stop()
            self.holders.clear()
            self.streaming_to = ""
        if tracer is not None:
            with contextlib.suppress(Exception):
                tracer.stop()

    def handle(self, line: str) -> str:
        cmd, _, arg = line.strip().partition(" ")
        cmd, arg = cmd.lower(), arg.strip()
        if cmd == "on":
            return self.on(arg)
        if cmd == "off":
            return self.off(arg)
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
            # The node agent is root without CAP_DAC_OVERRIDE: it needs the mode bits.
            os.chmod(self.path, SOCKET_MODE)
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


class PeerRefused(PermissionError):
    """The process listening on a control socket is not one the agent may talk to."""


def peer_pid(sock: socket.socket) -> int:
    """The pid (in our pid namespace) of the process that listens on a connected socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", raw)[0])


def switch(
    path: str | Path,
    command: str,
    timeout_s: float = 5.0,
    check_peer: Callable[[int], str] | None = None,
) -> str:
    """The node agent's side: send ``on``/``off``/``status``, return the answer line.

    The path is opened with O_PATH first and connected through ``/proc/self/fd/N``, so a
    long ``/proc/<pid>/root/...`` path fits the 108-byte socket-address limit.
    ``check_peer(pid)`` sees the listening process before anything is sent and returns ""
    or why it must not be talked to (then this raises ``PeerRefused``). OSError when no
    process listens there (it exited; the caller drops the socket).
    """
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(f"/proc/self/fd/{fd}")
            if check_peer is not None:
                why = check_peer(peer_pid(s))
                if why:
                    raise PeerRefused(why)
            s.sendall(command.encode() + b"\n")
            return s.recv(4096).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)


def pod_sockets(gpu_socket: str, pod_uid: str) -> list[Path]:
    """The control sockets of one pod's traced processes in the by-hand layout
    (``<socket dir>/ctl/<pod uid>``); in a cluster the agent looks in each pod's own folder."""
    d = control_dir(gpu_socket, pod_uid, env={})
    return sorted(d.glob("*.sock")) if d.is_dir() else []
