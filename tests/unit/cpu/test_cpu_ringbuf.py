"""The ring-buffer reader's walk over records, on a memfd laid out as the kernel lays out
a BPF ring buffer (consumer page, producer page, data mapped twice), so busy, discarded,
wrapping and unreadable records are exercised without BPF. The live map is read in
tests/integration/test_cpu_collector.py."""

import mmap
import os
import struct

import pytest

from kubeprof.agent.cpu.ringbuf import BUSY, DISCARD, HEADER, RingReader, record_span

PAGE = mmap.PAGESIZE
SIZE = 4 * PAGE


class FakeRing:
    """A memfd with the kernel's layout; writes go to both copies of the data."""

    def __init__(self) -> None:
        self.fd = os.memfd_create("ring")
        os.ftruncate(self.fd, 2 * PAGE + 2 * SIZE)
        self.map = mmap.mmap(self.fd, 2 * PAGE + 2 * SIZE)
        self.prod = 0

    def put(self, payload: bytes, flags: int = 0, at: int | None = None) -> None:
        pos = self.prod if at is None else at
        rec = struct.pack("<II", len(payload) | flags, 0) + payload
        for i, b in enumerate(rec):
            off = (pos + i) & (SIZE - 1)
            self.map[2 * PAGE + off] = b
            self.map[2 * PAGE + SIZE + off] = b
        if at is None:
            self.prod += record_span(len(payload))
            struct.pack_into("<Q", self.map, PAGE, self.prod)

    def consumer(self) -> int:
        return struct.unpack_from("<Q", self.map, 0)[0]

    def set_consumer(self, pos: int) -> None:
        struct.pack_into("<Q", self.map, 0, pos)
        self.prod = pos
        struct.pack_into("<Q", self.map, PAGE, pos)


def payloads(buf, at: int, length: int) -> bytes:
    return bytes(buf[at : at + length])


@pytest.fixture
def ring():
    r = FakeRing()
    yield r
    r.map.close()
    os.close(r.fd)


def test_records_in_order_discarded_skipped_and_released(ring):
    reader = RingReader(ring.fd, SIZE)
    ring.put(b"first")
    ring.put(b"gone", DISCARD)
    ring.put(b"x" * 13)
    assert reader.consume(payloads) == [b"first", b"x" * 13]
    assert ring.consumer() == record_span(5) + record_span(4) + record_span(13)
    assert reader.consume(payloads) == []  # nothing new: nothing twice
    reader.close()
    reader.close()


def test_stops_at_a_record_still_being_written_and_resumes_there(ring):
    reader = RingReader(ring.fd, SIZE)
    ring.put(b"done")
    busy_at = ring.prod
    ring.put(b"half", BUSY)
    ring.put(b"after")
    assert reader.consume(payloads) == [b"done"]
    assert ring.consumer() == busy_at  # the busy record is not released
    ring.put(b"half", at=busy_at)  # committed now
    assert reader.consume(payloads) == [b"half", b"after"]
    reader.close()


def test_a_record_that_wraps_the_end_reads_as_one_piece(ring):
    ring.set_consumer(10 * SIZE - 16)  # positions only grow: offsets wrap
    reader = RingReader(ring.fd, SIZE)
    body = bytes(range(200))
    ring.put(body)
    assert reader.consume(payloads) == [body]
    assert ring.consumer() == 10 * SIZE - 16 + record_span(200)
    reader.close()


def test_an_unreadable_record_is_counted_and_skipped(ring):
    reader = RingReader(ring.fd, SIZE)
    ring.put(b"bad")
    ring.put(b"good")

    def strict(buf, at, length):
        if length < 4:
            raise ValueError("short")
        return payloads(buf, at, length)

    assert reader.consume(strict) == [b"good"] and reader.bad == 1
    reader.close()


def test_size_must_be_a_power_of_two(ring):
    with pytest.raises(ValueError, match="power of two"):
        RingReader(ring.fd, 3 * PAGE)


def test_header_is_eight_bytes():
    assert HEADER == 8 and record_span(1) == 16 and record_span(8) == 16 and record_span(9) == 24
