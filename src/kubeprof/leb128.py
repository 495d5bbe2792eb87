"""LEB128, the variable-length integers of DWARF call frames (.eh_frame) and of protobuf
(pprof): one reader for both, since a protobuf varint is an unsigned LEB128."""

from __future__ import annotations


def read_uleb128(data: bytes, pos: int) -> tuple[int, int]:
    """The unsigned LEB128 at `pos`: (value, next position); IndexError if it runs past
    the end of `data`."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def read_sleb128(data: bytes, pos: int) -> tuple[int, int]:
    """The signed LEB128 at `pos`: the unsigned one, less 2**bits where the last byte's
    sign bit (0x40) is set."""
    value, end = read_uleb128(data, pos)
    if data[end - 1] & 0x40:
        value -= 1 << (7 * (end - pos))
    return value, end
