"""Just enough of the protobuf wire format to write and read pprof's profile.proto.

Hand-written so the report needs no protobuf package or generated code: profile.proto uses
only varints (wire type 0) and length-delimited fields (wire type 2: strings, sub-messages
and packed repeated integers).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from kubeprof.leb128 import read_uleb128

VARINT = 0
LEN = 2


def varint(value: int) -> bytes:
    """Base-128 varint; negative int64 values use their 64-bit two's complement."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class Message:
    """Append-only encoder for one message; fields are written in call order."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def number(self, field: int, value: int) -> Message:
        """A varint field; zero is the default and is left out, as protobuf does."""
        if value:
            self.buf += varint(field << 3 | VARINT)
            self.buf += varint(value)
        return self

    def blob(self, field: int, data: bytes) -> Message:
        """A length-delimited field (string, bytes or sub-message), always written."""
        self.buf += varint(field << 3 | LEN)
        self.buf += varint(len(data))
        self.buf += data
        return self

    def message(self, field: int, msg: Message) -> Message:
        """An embedded message."""
        return self.blob(field, bytes(msg.buf))

    def packed(self, field: int, values: Iterable[int]) -> Message:
        """A packed repeated integer field (left out when empty)."""
        data = b"".join(varint(v) for v in values)
        if data:
            self.blob(field, data)
        return self

    def encode(self) -> bytes:
        return bytes(self.buf)


def to_int64(value: int) -> int:
    """Reinterpret an unsigned 64-bit varint as signed int64."""
    return value - (1 << 64) if value >= 1 << 63 else value


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) pairs of one message: ints for varints, bytes for LEN fields."""
    pos = 0
    while pos < len(data):
        key, pos = read_uleb128(data, pos)
        field, wire = key >> 3, key & 7
        if wire == VARINT:
            value, pos = read_uleb128(data, pos)
            yield field, value
        elif wire == LEN:
            size, pos = read_uleb128(data, pos)
            yield field, data[pos : pos + size]
            pos += size
        elif wire == 1:  # fixed64: not used by profile.proto, skipped
            pos += 8
        elif wire == 5:  # fixed32
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire} for field {field}")


def unpack(value: int | bytes) -> list[int]:
    """Repeated integers, whether written packed (bytes) or one per field (int)."""
    if isinstance(value, int):
        return [value]
    out, pos = [], 0
    while pos < len(value):
        v, pos = read_uleb128(value, pos)
        out.append(v)
    return out
