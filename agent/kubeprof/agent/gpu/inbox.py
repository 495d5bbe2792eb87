"""Decoding: bytes read from tracer connections -> whole wire frames, queued for the join.

The socket server's I/O thread (or a capture replay) ``feed``s each connection's bytes here;
``take`` hands what arrived since the last call to the join, on the caller's thread. A
tap given here (capture.CaptureWriter) records every byte fed, before it is decoded, so a
capture holds exactly what the join was given.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

from kubeprof.agent.gpu.join import Header, Records
from kubeprof.agent.gpu.stack_join import ConnState
from kubeprof.agent.gpu.wire import FrameDecoder, FrameError


class Tap(Protocol):
    """Where the bytes fed are recorded (``capture.CaptureWriter``)."""

    def data(self, conn: int, chunk: bytes) -> None: ...

    def close_conn(self, conn: int) -> None: ...

    def close(self) -> None: ...


@dataclass
class Channel:
    """One tracer connection's byte stream and the join's state for it."""

    conn_id: int = 0  # order of acceptance, names the connection in a capture
    decoder: FrameDecoder = field(default_factory=FrameDecoder)
    state: ConnState = field(default_factory=ConnState)


class FrameInbox:
    """Thread-safe queue of decoded frames and connection events, per ``Channel``."""

    def __init__(self, capture: Tap | None = None) -> None:
        self.capture = capture
        self._lock = threading.Lock()
        self._frames: list[tuple[Channel, Header, Records]] = []
        self._events: list[tuple[Channel, str]] = []  # (channel, "closed"|"bad_frame")
        self._n_channels = 0

    def open(self) -> Channel:
        """A new connection's channel, numbered in order of opening."""
        self._n_channels += 1
        return Channel(self._n_channels)

    def feed(self, channel: Channel, data: bytes) -> bool:
        """Decode bytes read from a connection; False when the stream is corrupt."""
        if self.capture is not None:
            self.capture.data(channel.conn_id, data)
        try:
            frames = list(channel.decoder.feed(data))
        except FrameError:
            with self._lock:
                self._events.append((channel, "bad_frame"))
            return False
        if frames:
            with self._lock:
                self._frames.extend((channel, h, r) for h, r in frames)
        return True

    def closed(self, channel: Channel) -> None:
        """The tracer's end of a connection is gone (EOF, error or corrupt stream)."""
        if self.capture is not None:
            self.capture.close_conn(channel.conn_id)
        with self._lock:
            self._events.append((channel, "closed"))

    def take(
        self,
    ) -> tuple[list[tuple[ConnState, Header, Records]], list[tuple[ConnState, str, int]]]:
        """Frames and events since the last call, as the join reads them: an event carries
        the bytes of a frame its connection left unfinished."""
        with self._lock:
            frames, self._frames = self._frames, []
            events, self._events = self._events, []
        return (
            [(c.state, h, r) for c, h, r in frames],
            [(c.state, what, c.decoder.pending_bytes) for c, what in events],
        )

    def close(self) -> None:
        """End the capture, if one is written."""
        if self.capture is not None:
            self.capture.close()
