"""Transport: the unix socket in-process tracers connect to, served on a background thread.

One connection per traced process. The server knows bytes and peers, not frames: it hands
what it reads to ``on_data`` (False: drop the connection) and says when a connection ended
with ``on_close``. A connecting process is identified by SO_PEERCRED, in our pid namespace,
so the node agent can refuse processes outside its session's pods (``accept_peer``).
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SocketServer(Generic[T]):
    """Accepts and reads connections on ``path``; ``on_accept(peer_pid)`` names each one."""

    def __init__(
        self,
        path: str,
        *,
        mode: int,
        on_accept: Callable[[int], T],
        on_data: Callable[[T, bytes], bool],
        on_close: Callable[[T], None],
    ) -> None:
        self.path = path
        self.mode = mode
        # The node agent's filter: may this pid (ours, from SO_PEERCRED) send us records?
        # None: anyone who can open the socket (kubeprof record: same user, mode 0600).
        self.accept_peer: Callable[[int], bool] | None = None
        self._on_accept = on_accept
        self._on_data = on_data
        self._on_close = on_close
        self._sel = selectors.DefaultSelector()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._foreign = 0  # connections refused by accept_peer since the last take_foreign

    def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                os.unlink(self.path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path)
        os.chmod(self.path, self.mode)
        listener.listen(64)
        listener.setblocking(False)
        self._listener = listener
        self._sel.register(listener, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._run, name="kubeprof-gpu-receiver", daemon=True)
        self._thread.start()

    def take_foreign(self) -> int:
        """Connections refused by ``accept_peer`` since the last call."""
        with self._lock:
            n, self._foreign = self._foreign, 0
        return n

    def stop(self, deadline: float) -> None:
        """Stop the thread, read every connection to EOF (until ``deadline``, monotonic),
        then close them all and remove the socket."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        # finish the I/O here: accept what is still queued, read every connection to EOF
        while time.monotonic() < deadline:
            conns = [k.data for k in self._sel.get_map().values() if k.data is not None]
            if not conns and not self._pending_accept():
                break
            self._serve(0.05)
        for key in list(self._sel.get_map().values()):
            if key.data is not None:
                self._close(key.data)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    # ---- I/O thread ----
    def _run(self) -> None:
        while not self._stop.is_set():
            self._serve(0.1)

    def _serve(self, timeout: float) -> None:
        for key, _ in self._sel.select(timeout=timeout):
            if key.data is None:
                self._accept()
            else:
                self._read(key.data)

    def _accept(self) -> None:
        assert self._listener is not None
        with contextlib.suppress(BlockingIOError):
            sock, _ = self._listener.accept()
            try:
                raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
                peer = int.from_bytes(raw[:4], sys.byteorder, signed=True)
            except OSError:
                peer = 0
            if self.accept_peer is not None and not self.accept_peer(peer):
                # Not a process of this session's pods: its records are not ours to store.
                sock.close()
                with self._lock:
                    self._foreign += 1
                return
            sock.setblocking(False)
            self._sel.register(sock, selectors.EVENT_READ, (sock, self._on_accept(peer)))

    def _read(self, conn: tuple[socket.socket, T]) -> None:
        sock, handle = conn
        try:
            data = sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data or not self._on_data(handle, data):
            self._close(conn)

    def _close(self, conn: tuple[socket.socket, T]) -> None:
        sock, handle = conn
        with contextlib.suppress(Exception):
            self._sel.unregister(sock)
        sock.close()
        self._on_close(handle)

    def _pending_accept(self) -> bool:
        """A tracer that connected (maybe already exited) but is not accepted yet."""
        if self._listener is None:
            return False
        readable, _, _ = select.select([self._listener], [], [], 0)
        return bool(readable)
