"""Raw GPU wire captures: every byte a receiver read, to re-run the join on recorded inputs.

Fixtures that store the receiver's *output* freeze its stacks at recording time, so a test
replaying them never notices a broken kernel<->stack join. A capture stores its *input*:
the byte chunks read from each tracer connection (launch callbacks with their correlation
ids and stacks, activity records, messages) and when each connection closed. ``replay``
feeds them through the receiver's own decoding (``inbox``) and ``join``, without a socket.

Set ``KUBEPROF_GPU_CAPTURE=/path/file`` in the recorder's environment (``kubeprof record
--gpu``, the cluster agent) to write one. The file is gzip'd: a header record (magic,
format version, the wire schemas it was written with), then one record per chunk or close:
``kind (1 byte) | connection (u32) | CLOCK_MONOTONIC ns (i64) | length (u32) | bytes``.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubeprof.agent.gpu.inbox import Channel, FrameInbox
from kubeprof.agent.gpu.join import GpuJoin
from kubeprof.agent.gpu.wire import SCHEMAS, known_schemas
from kubeprof.model import Batch

ENV_CAPTURE = "KUBEPROF_GPU_CAPTURE"
MAGIC = b"KPGCAP1\n"
DATA, CLOSE = b"D", b"C"
_RECORD = struct.Struct("<cIqI")


class CaptureError(ValueError):
    """The file is not a kubeprof GPU capture, or was written with other wire schemas."""


class CaptureWriter:
    """Appends chunks to a capture file; called from the receiver's I/O thread."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        # held open for the receiver's lifetime; close() ends it
        f = gzip.GzipFile(self.path, "wb", compresslevel=6)
        head = json.dumps({"version": 1, "schemas": SCHEMAS}).encode()
        f.write(MAGIC + struct.pack("<I", len(head)) + head)
        self._f: gzip.GzipFile | None = f
        self._lock = threading.Lock()

    def data(self, conn: int, chunk: bytes) -> None:
        self._write(DATA, conn, chunk)

    def close_conn(self, conn: int) -> None:
        self._write(CLOSE, conn, b"")

    def _write(self, kind: bytes, conn: int, payload: bytes) -> None:
        with self._lock:
            if self._f is not None:
                self._f.write(_RECORD.pack(kind, conn, time.monotonic_ns(), len(payload)))
                self._f.write(payload)

    def close(self) -> None:
        with self._lock:
            f, self._f = self._f, None
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()


def read_capture(path: str | Path) -> Iterator[tuple[bytes, int, int, bytes]]:
    """(kind, connection, ts_ns, bytes) records of a capture, in the order they were read.

    A file cut short (the recorder killed) ends at its last whole record.
    """
    with gzip.open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise CaptureError(f"{path}: not a kubeprof GPU capture")
        (hlen,) = struct.unpack("<I", f.read(4))
        head = json.loads(f.read(hlen))
        schemas = {k: tuple(v) for k, v in head.get("schemas", {}).items()}
        # a capture from before a record kind was added replays (its frames have none), and
        # one of an older wire version (its frames say which)
        if not known_schemas(schemas):
            raise CaptureError(
                f"{path}: written with other wire schemas ({head.get('schemas')}); "
                "replay it with the kubeprof version that recorded it"
            )
        while True:
            try:
                raw = f.read(_RECORD.size)
                if len(raw) < _RECORD.size:
                    return
                kind, conn, ts, n = _RECORD.unpack(raw)
                payload = f.read(n)
            except EOFError:  # a truncated gzip stream
                return
            if len(payload) < n:
                return
            yield kind, conn, ts, payload


@dataclass
class Replayed:
    """What a receiver made of a capture: the batch, its messages, the targets' hellos."""

    batch: Batch
    messages: list[str] = field(default_factory=list)
    targets: dict[int, dict[str, Any]] = field(default_factory=dict)


def replay(path: str | Path, *, xla_dump_dir: str | Path | None = None) -> Replayed:
    """Feed a capture through the real decoding and join code (the receiver's, without its
    socket); ``xla_dump_dir``: the HLO modules the traced JAX process dumped while recorded."""
    inbox = FrameInbox()  # no tap: never capture the replay itself
    join = GpuJoin(str(xla_dump_dir) if xla_dump_dir else None)
    acts: list[Any] = []
    metrics: list[Any] = []
    counters: dict[str, int] = {}
    channels: dict[int, Channel] = {}
    for n, (kind, conn_id, _ts, payload) in enumerate(read_capture(path)):
        channel = channels.get(conn_id)
        if channel is None:
            channel = channels[conn_id] = inbox.open()
        if kind == DATA:
            inbox.feed(channel, payload)
        elif kind == CLOSE:
            inbox.closed(channel)
        if n % 64 == 63:  # convert as the recorder's polls would, bounding memory
            _add(join.convert(*inbox.take()), acts, metrics, counters)
    _add(join.convert(*inbox.take()), acts, metrics, counters)
    batch = Batch(gpu_activities=tuple(acts), gpu_metrics=tuple(metrics), counters=counters)
    return Replayed(batch, list(join.messages), dict(join.targets))


def _add(batch: Batch, acts: list[Any], metrics: list[Any], counters: dict[str, int]) -> None:
    acts.extend(batch.gpu_activities)
    metrics.extend(batch.gpu_metrics)
    for k, v in batch.counters.items():
        counters[k] = counters.get(k, 0) + v
