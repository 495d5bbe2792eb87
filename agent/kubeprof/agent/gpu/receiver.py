"""Recorder/agent side of the GPU wire: accept tracers, join launches to GPU records.

Three parts, each its own module: the socket server (``transport``) reads bytes from each
traced process on a background thread, the ``inbox`` decodes them into frames, and ``poll()``
hands those to the ``join``, which turns them into ``kubeprof.model`` records (each
kernel/memcpy/memset joined to the Python stack captured at its launch by correlation id).
Counters in each returned ``Batch`` are increments since the previous one (sum them for
totals).

With ``KUBEPROF_GPU_CAPTURE=/path/file`` set, every byte read is also written to a capture
(see ``capture.py``) that ``capture.replay`` runs through the same inbox and join later.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from typing import Any

from kubeprof.agent.gpu.capture import ENV_CAPTURE, CaptureWriter
from kubeprof.agent.gpu.inbox import Channel, FrameInbox
from kubeprof.agent.gpu.join import GpuJoin
from kubeprof.agent.gpu.transport import SocketServer
from kubeprof.agent.gpu.xla_hlo import XlaIndex
from kubeprof.model import Batch


class GpuReceiver:
    """Listen on ``socket_path``; ``poll()`` and finally ``stop()`` return Batches."""

    def __init__(
        self,
        socket_path: str,
        *,
        mode: int = 0o600,
        capture_path: str | None = None,
        xla_dump_dir: str | None = None,
        remove_xla_dump: bool = False,
    ) -> None:
        """``capture_path`` (default: $KUBEPROF_GPU_CAPTURE) records every byte read;
        ``xla_dump_dir`` is where traced JAX processes dump their optimised HLO modules
        (see xla_hlo), so XLA's kernels are charged to the Python line of their op."""
        self.socket_path = socket_path
        self.mode = mode
        if capture_path is None:
            capture_path = os.environ.get(ENV_CAPTURE) or None
        self.capture = CaptureWriter(capture_path) if capture_path else None
        self.inbox = FrameInbox(self.capture)
        self.join = GpuJoin(xla_dump_dir)
        self.server: SocketServer[Channel] = SocketServer(
            socket_path,
            mode=mode,
            on_accept=self._accepted,
            on_data=self.inbox.feed,
            on_close=self.inbox.closed,
        )
        self._remove_xla_dump = remove_xla_dump  # a folder of ours: gone after stop()

    @property
    def messages(self) -> list[str]:
        """One-line notes from tracers and about them."""
        return self.join.messages

    @property
    def targets(self) -> dict[int, dict[str, Any]]:
        """pid -> its hello (argv, versions, config)."""
        return self.join.targets

    @property
    def tracer_errors(self) -> dict[int, str]:
        """pid -> why its tracer did not start / failed."""
        return self.join.tracer_errors

    @property
    def xla(self) -> XlaIndex | None:
        return self.join.xla

    @property
    def accept_peer(self) -> Callable[[int], bool] | None:
        """The node agent's filter: may this pid (ours, from SO_PEERCRED) send us records?
        None: anyone who can open the socket (kubeprof record: same user, mode 0600)."""
        return self.server.accept_peer

    @accept_peer.setter
    def accept_peer(self, accept: Callable[[int], bool] | None) -> None:
        self.server.accept_peer = accept

    def start(self) -> None:
        self.server.start()

    def _accepted(self, peer: int) -> Channel:
        channel = self.inbox.open()
        channel.state.peer_pid = peer
        return channel

    def new_connection(self) -> Channel:
        """A connection fed by hand (``feed``/``closed``) rather than by the socket server."""
        return self.inbox.open()

    def feed(self, conn: Channel, data: bytes) -> bool:
        """Decode bytes read from a connection; False when the stream is corrupt."""
        return self.inbox.feed(conn, data)

    def closed(self, conn: Channel) -> None:
        """The tracer's end of a connection is gone (EOF, error or corrupt stream)."""
        self.inbox.closed(conn)

    def poll(self) -> Batch:
        """Everything that arrived since the last call, joined and converted."""
        self.join.count("gpu_tracer_foreign", self.server.take_foreign())
        frames, events = self.inbox.take()
        return self.join.convert(frames, events)

    def stop(self, timeout_s: float = 5.0) -> Batch:
        """Wait (bounded) for connected tracers to finish, stop, and return the rest."""
        self.server.stop(time.monotonic() + timeout_s)
        self.inbox.close()
        batch = self.poll()
        if self.join.xla is not None and self._remove_xla_dump:
            shutil.rmtree(self.join.xla.folder, ignore_errors=True)
        return batch

    def tracer_status(self) -> dict[str, str]:
        """Session meta on the in-process tracers (see ``GpuJoin.tracer_status``)."""
        return self.join.tracer_status()
