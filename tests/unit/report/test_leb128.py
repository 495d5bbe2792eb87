"""The one LEB128 reader serves .eh_frame (signed and unsigned) and pprof (protobuf varints)."""

from __future__ import annotations

import pytest

from kubeprof.leb128 import read_sleb128, read_uleb128
from kubeprof.report.protowire import varint

# The DWARF 5 specification's examples (section 7.6, tables 7.7 and 7.8).
UNSIGNED = [
    (2, b"\x02"),
    (127, b"\x7f"),
    (128, b"\x80\x01"),
    (129, b"\x81\x01"),
    (130, b"\x82\x01"),
    (12857, b"\xb9\x64"),
]
SIGNED = [
    (2, b"\x02"),
    (-2, b"\x7e"),
    (127, b"\xff\x00"),
    (-127, b"\x81\x7f"),
    (128, b"\x80\x01"),
    (-128, b"\x80\x7f"),
    (129, b"\x81\x01"),
    (-129, b"\xff\x7e"),
]


@pytest.mark.parametrize(("value", "encoded"), UNSIGNED)
def test_unsigned_values_of_the_dwarf_specification(value: int, encoded: bytes) -> None:
    assert read_uleb128(b"\xaa" + encoded + b"\xbb", 1) == (value, 1 + len(encoded))


@pytest.mark.parametrize(("value", "encoded"), SIGNED)
def test_signed_values_of_the_dwarf_specification(value: int, encoded: bytes) -> None:
    assert read_sleb128(b"\xaa" + encoded + b"\xbb", 1) == (value, 1 + len(encoded))


@pytest.mark.parametrize("value", [0, 1, 300, 2**32, 2**63 - 1, -1, -(2**63)])
def test_reads_back_what_the_pprof_writer_writes(value: int) -> None:
    data = varint(value)
    assert read_uleb128(data, 0) == (value % 2**64, len(data))


def test_a_varint_cut_short_is_an_error_not_a_value() -> None:
    with pytest.raises(IndexError):
        read_uleb128(b"\x80\x80", 0)
