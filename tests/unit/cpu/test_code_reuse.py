"""A code object's address reused by another: the cached name must not outlive the object.

Real code objects of this process, read through /proc/self/mem as the collector reads a
target's: one is copied into a buffer, read and cached, then another is copied over it at
the same address (what CPython's allocator does with a freed object's memory)."""

from __future__ import annotations

import ctypes
import os
import sys

import pytest

from kubeprof.agent import cpython_layout
from kubeprof.agent.cpu.cpython_code import _CODE_READ, CodeReader

LAYOUT = cpython_layout.layout_for(sys.version_info[:2])
pytestmark = pytest.mark.skipif(LAYOUT is None, reason="no CPython layout for this Python")


def _code(name: str):
    ns: dict = {}
    exec(f"def {name}():\n    return 1\n", ns)
    return ns[name].__code__


def _at(arena: ctypes.Array, code) -> None:
    ctypes.memmove(arena, id(code), _CODE_READ)


def test_a_reused_address_is_named_again_after_a_recheck():
    assert LAYOUT is not None
    first, second = _code("first_fn"), _code("second_fn")
    arena = ctypes.create_string_buffer(_CODE_READ)
    addr = ctypes.addressof(arena)
    _at(arena, first)
    reader = CodeReader(os.getpid(), LAYOUT)
    info = reader.code(addr)
    assert info is not None and info.name == "first_fn"
    raw = (addr, info.code_start + 2 * info.firsttraceable, 0)
    assert (frame := reader.frame(raw)) is not None and frame.name == "first_fn"
    assert reader.recheck([addr]) is False and reader.code(addr) is info  # same object: kept

    _at(arena, second)  # the first freed, the second allocated where it was
    assert reader.code(addr).name == "first_fn"  # the cache, until it is rechecked
    assert reader.recheck([addr]) is True
    assert reader.code(addr).name == "second_fn"
    assert (frame := reader.frame(raw)) is not None and frame.name == "second_fn"
    assert reader.recheck([addr]) is False
    reader.close()


def test_recheck_reads_only_the_addresses_it_is_given():
    """The collector asks about the code objects a poll's samples name, nothing else."""
    assert LAYOUT is not None
    codes = [_code(f"fn_{i}") for i in range(3)]
    arenas = [ctypes.create_string_buffer(_CODE_READ) for _ in codes]
    reader = CodeReader(os.getpid(), LAYOUT)
    for arena, code in zip(arenas, codes, strict=True):
        _at(arena, code)
        reader.code(ctypes.addressof(arena))
    _at(arenas[2], codes[0])  # the last one changes
    a0, a1, a2 = (ctypes.addressof(a) for a in arenas)
    assert reader.recheck([a0, a1, 12345]) is False  # unchanged, and one never read
    assert reader.code(a2).name == "fn_2"
    assert reader.recheck([a2]) is True and reader.code(a2).name == "fn_0"
    reader.close()


def test_freed_memory_that_is_no_code_object_keeps_the_name_it_had():
    """A program's `<module>` code object freed while the interpreter shut down: the
    allocator wrote its own words over the object's head and the memory was reused, and
    the recheck read it again and named the last poll's samples "?" (a 3.13 CI run: 28 of
    245). No frame runs memory that is no code object, so those samples ran the old one."""
    assert LAYOUT is not None
    code = _code("gone_fn")
    arena = ctypes.create_string_buffer(_CODE_READ)
    addr = ctypes.addressof(arena)
    _at(arena, code)
    reader = CodeReader(os.getpid(), LAYOUT)
    assert reader.code(addr).name == "gone_fn"
    # glibc's free: the chunk's next pointer and key over ob_refcnt and ob_type; then the
    # memory handed out again, the name's word overwritten by whatever took it
    junk = (0x5A5A5A5A5A5A5A5A).to_bytes(8, "little")
    ctypes.memmove(addr, junk * 2, 16)
    ctypes.memmove(addr + LAYOUT.code_name, junk, 8)
    assert reader.recheck([addr]) is False
    assert reader.code(addr).name == "gone_fn"
    reader.close()
