"""The BPF ring buffer read straight from its mapped pages, as libbpf reads it.

bcc hands each record to a Python function through a ctypes callback: per sample that
is a C-to-Python transition, bcc's wrapper, and a copy of the record's whole fixed part
(4.4 KiB) before a field is read. At 99 Hz per CPU that was about a quarter of the
collector's CPU. Here the consumer page and the data pages (mapped twice by the
kernel, so a record that wraps reads as one piece) are mapped once, and each record is
decoded where it lies; only the parts it uses are copied out.

Layout (kernel/bpf/ringbuf.c): page 0 holds the consumer position (ours to write),
page 1 the producer position, data follows. Each record starts with an 8-byte header,
a u32 length with a busy bit (still being written) and a discard bit, and is padded to
8 bytes. Positions grow without wrapping; the offset is position & (size - 1). Loads
and the consumer store are single aligned 8- or 4-byte accesses; x86-64 keeps loads in
order, which is the acquire ordering libbpf asks for.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import struct
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
BUSY, DISCARD, HEADER = 1 << 31, 1 << 30, 8


def record_span(length: int) -> int:
    """Bytes a record with this header length takes in the ring (header and padding)."""
    return ((length & ~(BUSY | DISCARD)) + HEADER + 7) & ~7


class RingReader:
    """Consumes one BPF_MAP_TYPE_RINGBUF map of `size` bytes (a power of two)."""

    def __init__(self, map_fd: int, size: int) -> None:
        if size & (size - 1):
            raise ValueError(f"ring buffer size {size} is not a power of two")
        page = mmap.PAGESIZE
        self._page, self._mask = page, size - 1
        self._cons_map = mmap.mmap(
            map_fd, page, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE
        )
        self._data_map = mmap.mmap(
            map_fd, page + 2 * size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ, offset=page
        )
        self._cons: ctypes.c_uint64 | None = ctypes.c_uint64.from_buffer(self._cons_map)
        self._bytes: memoryview | None = memoryview(self._data_map)
        self._words: memoryview | None = self._bytes.cast("Q")
        self._halves: memoryview | None = self._bytes.cast("I")
        self._read = self._cons.value  # records up to here are decoded (maybe not released)
        self.bad = 0  # records decode() refused (skipped, counted)

    def consume(
        self, decode: Callable[[memoryview, int, int], T], *, hold: bool = False
    ) -> list[T]:
        """`decode(ring, offset, length)` of every committed record, oldest first.

        A record is released to the kernel only after decode() returned: its bytes
        cannot change under it. With `hold`, records stay unreleased (so views that
        decode() kept into the ring stay valid) until `release()`. Stops at the first
        record still being written.
        """
        cons_ref, ring, words, halves = self._cons, self._bytes, self._words, self._halves
        if cons_ref is None or ring is None or words is None or halves is None:
            return []
        page, mask = self._page, self._mask
        out: list[T] = []
        pos = self._read
        while True:
            prod = words[0]  # the producer position: the first word of the data mapping
            if pos >= prod:
                return out
            while pos < prod:
                at = page + (pos & mask)
                length = halves[at >> 2]
                if length & BUSY:
                    return out
                if not length & DISCARD:
                    try:
                        out.append(decode(ring, at + HEADER, length))
                    except (struct.error, ValueError, IndexError):
                        self.bad += 1  # a record this reader cannot parse: skip it
                pos += record_span(length)
                self._read = pos
                if not hold:
                    cons_ref.value = pos

    def release(self) -> None:
        """Hand every record consumed so far back to the kernel."""
        if self._cons is not None:
            self._cons.value = self._read

    def close(self) -> None:
        """Unmap; safe to call twice. Views a caller still holds keep the data pages
        mapped until they are dropped (the mapping refuses to close under them)."""
        self._cons = None
        with contextlib.suppress(BufferError):  # never in the way of detaching the program
            for view in (self._words, self._halves, self._bytes):
                if view is not None:
                    view.release()
            self._data_map.close()
        self._words = self._halves = self._bytes = None
        self._cons_map.close()
