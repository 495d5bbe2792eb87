"""The wire between the in-process GPU tracer and the recorder: framed batches on a unix socket.

A frame is ``MAGIC | header length | payload length | header (JSON) | payload``; the payload
is one little-endian int64 array per record kind, laid out by ``SCHEMAS``. Integers go as
packed arrays because a launch-bound workload produces ~100k records a second and JSON for
each would cost the workload more CPU than the tracing itself. Strings (kernel names, file
names) and stacks are interned: each is defined once per connection in a header.

This module is imported inside the profiled process: standard library only, and nothing here
may block or raise into the workload. ``Sender`` keeps a bounded queue, drops and counts when
the receiver is slow or gone, and reconnects when it comes back.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import sys
import threading
import time
from array import array
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Any

MAGIC = b"KPG1"
_PREFIX = struct.Struct("<4sII")
MAX_HEADER = 64 << 20  # refuse absurd frames instead of allocating them
MAX_PAYLOAD = 512 << 20

# Record layouts, one int64 per field. Names are string ids (see "strings" in headers).
# Every frame's header says the version it was written in ("wire"; absent: 1), so frames and
# captures of an older tracer still decode: fields a version lacks read as 0.
WIRE_VERSION = 2
SCHEMAS: dict[str, tuple[str, ...]] = {
    # an API call that can start GPU work, with the Python stack seen at its entry; tid is
    # the thread's Python ident (keys autograd rows), time the call's entry in host
    # CLOCK_MONOTONIC ns (stamped by the tracer, already the host clock: no offset added),
    # os_tid the kernel's id of that thread (gettid, in the tracer's pid namespace), the one
    # CPU samples carry. time and os_tid are 0 in version 1 frames.
    "launch": ("correlation_id", "stack_id", "api", "tid", "time", "os_tid"),
    # PyTorch autograd sequence number at a launch (see autograd.py): backward = 0, a forward
    # launch's at::sequence_number::peek() (sent when it changed on that thread); backward
    # = 1, the sequence number of the autograd node that launched it (from the engine's
    # thread, which has no Python stack: the receiver gives it its forward op's stack)
    "autograd": ("correlation_id", "seq", "tid", "backward"),
    "kernel": (
        "start",
        "end",
        "device",
        "correlation_id",
        "stream",
        "grid_x",
        "grid_y",
        "grid_z",
        "block_x",
        "block_y",
        "block_z",
        "registers",
        "static_smem",
        "dynamic_smem",
        "graph_id",
        "context",
        "name",
    ),
    # src/dst_kind: CUPTI memory kinds (1 pageable, 2 pinned, 3 device, ...), so a host copy
    # says whether it ran from pageable memory (staged by the driver, synchronous) or pinned
    "memcpy": (
        "start",
        "end",
        "device",
        "correlation_id",
        "stream",
        "bytes",
        "copy_kind",
        "src_kind",
        "dst_kind",
    ),
    "memset": ("start", "end", "device", "correlation_id", "stream", "bytes"),
    # host-side waits for the GPU (cudaStreamSynchronize, cudaEventSynchronize, ...)
    "sync": ("start", "end", "context", "correlation_id", "stream", "type"),
    # NVTX: flags bit 1 = start, bit 2 = end (CUPTI's MARKER_START/END), name only on start
    "marker": ("ts", "id", "flags", "name", "tid"),
    # CUPTI PM sampling: one metric (name) over [start, end], value in thousandths
    "pm": ("start", "end", "device", "value_milli", "name"),
}
# What older versions wrote, where it differs from SCHEMAS (a prefix of the current layout).
OLD_SCHEMAS: dict[int, dict[str, tuple[str, ...]]] = {
    1: {"launch": ("correlation_id", "stack_id", "api", "tid")},
}
# Times in GPU records are CUPTI timestamps (ns); each frame's header carries
# "clock_offset_ns" = host CLOCK_MONOTONIC - CUPTI clock, which the receiver adds.
# Drain order inside a frame: GPU records first, launches after, so every record in a
# frame has its launch (appended earlier) in the same frame or an earlier one.
DRAIN_ORDER = ("kernel", "memcpy", "memset", "sync", "marker", "pm", "autograd", "launch")
MAX_RECORDS_PER_FRAME = 100_000


def encode_frame(
    header: dict[str, Any],
    records: dict[str, list[tuple[int, ...]]],
    packed: dict[str, tuple[bytes, int]] | None = None,
) -> bytes:
    """One frame; ``header["counts"]`` is filled from ``records`` and ``packed`` (rows
    already laid out as little-endian int64, by the C launch hook: appended after a kind's
    tuples)."""
    counts = {}
    parts = []
    for kind in DRAIN_ORDER:
        rows = records.get(kind) or []
        blob, n = (packed or {}).get(kind, (b"", 0))
        if not rows and not n:
            continue
        counts[kind] = len(rows) + n
        if rows:
            arr = array("q", chain.from_iterable(rows))
            if sys.byteorder != "little":
                arr.byteswap()
            parts.append(arr.tobytes())
        if n:
            parts.append(blob)
    header = {**header, "counts": counts}
    head = json.dumps(header, separators=(",", ":")).encode()
    payload = b"".join(parts)
    return _PREFIX.pack(MAGIC, len(head), len(payload)) + head + payload


class FrameError(ValueError):
    """The byte stream is not a kubeprof GPU wire stream (or is corrupt)."""


class FrameDecoder:
    """Incremental decoder: feed bytes as they arrive, take whole frames out."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(
        self, data: bytes
    ) -> Iterator[tuple[dict[str, Any], dict[str, list[tuple[int, ...]]]]]:
        """Yield (header, {kind: [record tuple, ...]}) for each complete frame."""
        self._buf += data
        while len(self._buf) >= _PREFIX.size:
            magic, hlen, plen = _PREFIX.unpack_from(self._buf)
            if magic != MAGIC or hlen > MAX_HEADER or plen > MAX_PAYLOAD:
                raise FrameError("not a kubeprof GPU frame")
            end = _PREFIX.size + hlen + plen
            if len(self._buf) < end:
                return
            head = bytes(self._buf[_PREFIX.size : _PREFIX.size + hlen])
            payload = bytes(self._buf[_PREFIX.size + hlen : end])
            del self._buf[:end]
            yield decode_frame(head, payload)

    @property
    def pending_bytes(self) -> int:
        """Bytes of an incomplete frame (non-zero when a target died mid-frame)."""
        return len(self._buf)


def decode_frame(
    head: bytes, payload: bytes
) -> tuple[dict[str, Any], dict[str, list[tuple[int, ...]]]]:
    """Decode one frame's header and payload (the inverse of ``encode_frame``)."""
    try:
        header = json.loads(head)
    except ValueError as exc:
        raise FrameError(f"bad frame header: {exc}") from None
    arr = array("q")
    arr.frombytes(payload)
    if sys.byteorder != "little":
        arr.byteswap()
    records: dict[str, list[tuple[int, ...]]] = {}
    pos = 0
    old = _old_schemas(header.get("wire", 1))
    for kind in DRAIN_ORDER:
        n = int(header.get("counts", {}).get(kind, 0))
        if not n:
            continue
        width = len(old.get(kind, SCHEMAS[kind]))
        flat = arr[pos : pos + n * width]
        if len(flat) != n * width:
            raise FrameError(f"truncated {kind} records")
        pos += n * width
        rows = [tuple(flat[i : i + width]) for i in range(0, n * width, width)]
        if width < len(SCHEMAS[kind]):  # an older tracer's rows: its missing fields are 0
            pad = (0,) * (len(SCHEMAS[kind]) - width)
            rows = [r + pad for r in rows]
        records[kind] = rows
    return header, records


def _old_schemas(version: object) -> dict[str, tuple[str, ...]]:
    """The layouts of ``version`` that differ from SCHEMAS; FrameError for an unknown one."""
    if version == WIRE_VERSION:
        return {}
    if isinstance(version, int) and version in OLD_SCHEMAS:
        return OLD_SCHEMAS[version]
    raise FrameError(f"wire version {version!r} unknown (this receiver reads 1..{WIRE_VERSION})")


def known_schemas(schemas: dict[str, tuple[str, ...]]) -> bool:
    """Whether ``schemas`` (a capture's header) are this version's or an older one's."""
    return any(
        all(v == {**SCHEMAS, **OLD_SCHEMAS.get(version, {})}.get(k) for k, v in schemas.items())
        for version in (WIRE_VERSION, *OLD_SCHEMAS)
    )


class Sender:
    """Target side of the wire: a bounded queue drained by a daemon thread.

    ``put``/``put_many`` are called from CUPTI callbacks on the workload's threads: they
    only append to a deque (thread-safe, no lock) or count a drop when the queue is full.
    Everything slow (encoding, socket I/O, reconnecting) happens on the sender thread.
    """

    def __init__(
        self,
        path: str,
        *,
        max_queued: int = 1_000_000,
        interval_s: float = 0.25,
        send_timeout_s: float = 2.0,
    ) -> None:
        self.path = path
        self.max_queued = max_queued
        self.interval_s = interval_s
        self.send_timeout_s = send_timeout_s
        self.queues: dict[str, deque[tuple[int, ...]]] = {k: deque() for k in SCHEMAS}
        self.counters: dict[str, int] = {"dropped": 0, "frames": 0, "reconnects": 0}
        self.strings: list[str] = []  # id -> string (id 0 is "")
        self._string_ids: dict[str, int] = {}
        self.stacks: list[list[list[int]]] = []  # stack id -> frames (leaf first)
        self._sent_strings = 0  # how many of self.strings this connection knows
        self._sent_stacks = 0
        self._sock: socket.socket | None = None
        self._next_connect = 0.0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # serialises draining (thread vs final flush) and definitions; re-entrant because
        # tick hooks run under it and may intern strings
        self._lock = threading.RLock()
        self.hello: dict[str, Any] = {"pid": os.getpid()}
        self.tick_hooks: list[Any] = []  # called on the sender thread before each drain
        self.pending_messages: list[tuple[str, str]] = []  # (level, text) for the next frame
        self.clock_offset_ns = 0  # set by the tracer; sent in every header
        # the C launch hook, when it packs rows itself: take(kind, max_rows) -> (bytes, n)
        self.packed: Any = None
        self.intern("")

    # ---- called from the workload's threads (must stay cheap) ----
    def intern(self, text: str) -> int:
        """Id of a string, defining it for the receiver on first use."""
        sid = self._string_ids.get(text)
        if sid is None:
            with self._lock:
                sid = self._string_ids.get(text)
                if sid is None:
                    sid = len(self.strings)
                    self.strings.append(text)
                    self._string_ids[text] = sid
        return sid

    def define_stack(self, frames: list[list[int]]) -> int:
        """Register a new stack (frames leaf first, each [name_id, file_id, line, kind])."""
        with self._lock:
            self.stacks.append(frames)
            return len(self.stacks)  # ids start at 1; 0 means "no stack"

    def put(self, kind: str, record: tuple[int, ...]) -> None:
        q = self.queues[kind]
        if len(q) >= self.max_queued:
            self.counters["dropped"] += 1
            return
        q.append(record)

    def put_many(self, kind: str, records: Iterable[tuple[int, ...]]) -> None:
        q = self.queues[kind]
        room = self.max_queued - len(q)
        recs = list(records)
        if len(recs) > room:
            self.counters["dropped"] += len(recs) - max(room, 0)
            recs = recs[: max(room, 0)]
        q.extend(recs)

    # ---- sender thread ----
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kubeprof-gpu-sender", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.drain_and_send()
            except Exception as exc:  # never let the thread die silently  # noqa: BLE001 - must never break the workload
                self.counters["sender_errors"] = self.counters.get("sender_errors", 0) + 1
                warn(f"sender error: {exc!r}")

    def drain_and_send(self, *, final: bool = False) -> None:
        """Move queued records into frames and send them (or count them dropped)."""
        with self._lock:
            for hook in self.tick_hooks:
                hook()
            for _ in range(64):  # bounded: a workload refilling faster must not pin us here
                records: dict[str, list[tuple[int, ...]]] = {}
                packed: dict[str, tuple[bytes, int]] = {}
                total = 0
                for kind in DRAIN_ORDER:
                    q = self.queues[kind]
                    rows = []
                    pop = q.popleft
                    for _ in range(min(len(q), MAX_RECORDS_PER_FRAME)):
                        rows.append(pop())
                    if rows:
                        records[kind] = rows
                        total += len(rows)
                    if self.packed is not None:
                        blob, n = self.packed.take(kind, MAX_RECORDS_PER_FRAME - len(rows))
                        if n:
                            packed[kind] = (blob, n)
                            total += n
                if not self._ensure_connected(force=final):
                    self.counters["dropped"] += total
                    if not any(self.queues.values()):
                        return
                    continue
                header = self._header("data")
                if not self._send(encode_frame(header, records, packed)):
                    self.counters["dropped"] += total
                if total < MAX_RECORDS_PER_FRAME:
                    return

    def _header(self, kind: str) -> dict[str, Any]:
        strings = self.strings[self._sent_strings :]
        base_s = self._sent_strings
        stacks = self.stacks[self._sent_stacks :]
        base_k = self._sent_stacks
        self._sent_strings += len(strings)
        self._sent_stacks += len(stacks)
        messages, self.pending_messages = self.pending_messages, []
        return {
            "messages": messages,
            "wire": WIRE_VERSION,
            "clock_offset_ns": self.clock_offset_ns,
            "t": kind,
            "pid": os.getpid(),
            "strings_base": base_s,
            "strings": strings,
            "stacks_base": base_k + 1,
            "stacks": stacks,
            "counters": dict(self.counters),
        }

    def _ensure_connected(self, *, force: bool = False) -> bool:
        if self._sock is not None:
            return True
        now = time.monotonic()
        if now < self._next_connect and not force:
            return False
        self._next_connect = now + 1.0
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.send_timeout_s)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            return False
        self._sock = sock
        self._sent_strings = 0  # a new connection knows nothing: define everything again
        self._sent_stacks = 0
        self.counters["reconnects"] += 1
        return self._send(encode_frame({**self._header("hello"), **self.hello}, {}))

    def _send(self, frame: bytes) -> bool:
        sock = self._sock
        if sock is None:
            return False
        try:
            sock.sendall(frame)
        except OSError:
            # a partial frame would corrupt the stream: close, reconnect later, resend defs
            self._drop_connection()
            return False
        self.counters["frames"] += 1
        return True

    def _drop_connection(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None

    def send_message(self, level: str, text: str) -> None:
        """Ship a one-line status message (errors, warnings) to the recorder."""
        with self._lock:
            if self._ensure_connected(force=True):
                self._send(
                    encode_frame({**self._header("message"), "level": level, "text": text}, {})
                )

    def close(self, timeout_s: float = 3.0) -> None:
        """Final drain and a goodbye frame; bounded in time, safe to call twice."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        if self._sock is not None:
            self._sock.settimeout(timeout_s)
        self.drain_and_send(final=True)
        with self._lock:
            if self._ensure_connected(force=True):
                self._send(encode_frame(self._header("bye"), {}))
            self._drop_connection()
        if self.counters["dropped"] and os.environ.get("KUBEPROF_GPU_QUIET") != "1":
            warn(
                f"{self.counters['dropped']} GPU records dropped "
                f"(receiver at {self.path or '-'} unreachable or too slow)"
            )


def warn(text: str) -> None:
    """One line on stderr, never raising (stderr may be closed)."""
    try:
        sys.stderr.write(f"kubeprof-gpu: {text}\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - must never break the workload
        pass
