"""Pure parts of the BPF Python unwinder: grouping, line tables, interleaving, layouts."""

import struct
import sys

import pytest

from kubeprof.agent import cpython_layout
from kubeprof.agent.cpu.cpython_code import groups, line_310, line_311
from kubeprof.agent.cpu.merge import interleave
from kubeprof.model import Frame, FrameKind

L310, L311, L312, L313 = (cpython_layout.LAYOUTS[(3, m)] for m in (10, 11, 12, 13))
LIBPY = "/usr/lib/libpython3.11.so.1.0"
EVAL = Frame("_PyEval_EvalFrameDefault", FrameKind.NATIVE, LIBPY)
EVAL_COLD = Frame("_PyEval_EvalFrameDefault.cold", FrameKind.NATIVE, LIBPY)
MAIN_C = Frame("main", FrameKind.NATIVE, "/usr/bin/python3.11")
QSORT = Frame("qsort_r", FrameKind.NATIVE, "/lib/libc.so.6")
ADD = Frame("_PyLong_Add", FrameKind.NATIVE, LIBPY)
KERN = Frame("asm_exc_page_fault", FrameKind.KERNEL)


def py(name):
    return Frame(name, FrameKind.PYTHON, "/a.py", 1)


def test_groups_311_end_at_entry_frames():
    # innermost first: work, compare (entry: called from C), sort, main, <module> (entry)
    frames = [(1, 0, 0), (2, 0, 1), (3, 0, 0), (4, 0, 0), (5, 0, 1 | (1 << 8))]
    assert groups(frames, L311) == [[(1, 0, 0), (2, 0, 1)], [(3, 0, 0), (4, 0, 0), (5, 0, 257)]]


@pytest.mark.parametrize("layout", [L312, L313])
def test_groups_312_313_split_at_cstack_shims_which_are_dropped(layout):
    shim = (9, 0, cpython_layout.OWNED_BY_CSTACK)
    frames = [(1, 0, 0), shim, (3, 0, 0), (4, 0, 1), shim]
    assert groups(frames, layout) == [[(1, 0, 0)], [(3, 0, 0), (4, 0, 1)]]


def test_groups_310_one_frame_per_eval_call():
    assert groups([(1, 5, 0), (2, 6, 0)], L310) == [[(1, 5, 0)], [(2, 6, 0)]]


def test_interleave_puts_each_group_under_its_eval_frame():
    native = [MAIN_C, EVAL, QSORT, EVAL_COLD, ADD]
    out = interleave([[py("compare"), py("work")], [py("main"), py("sort")]], native, [KERN])
    names = [f.name for f in out]
    assert names == [
        "main",
        "_PyEval_EvalFrameDefault",
        "main",
        "sort",
        "qsort_r",
        "_PyEval_EvalFrameDefault.cold",
        "compare",
        "work",
        "_PyLong_Add",
        "asm_exc_page_fault",
    ]


def test_interleave_puts_groups_left_over_by_a_short_unwind_at_the_root():
    out = interleave([[py("inner")], [py("outer")]], [EVAL, ADD], [])
    assert [f.name for f in out] == ["outer", "_PyEval_EvalFrameDefault", "inner", "_PyLong_Add"]
    assert interleave([], [EVAL, ADD], [KERN]) == (EVAL, ADD, KERN)


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="3.11's location table format")
def test_line_311_agrees_with_cpython_for_every_instruction():
    src = (
        "def f(a):\n    x = a + 1\n\n    if x:\n"
        "        return [i\n   for i in range(x)]\n    return 0\n"
    )
    code = compile(src, "f.py", "exec").co_consts[0]
    checked = 0
    for start, end, line in code.co_lines():
        for offset in range(start, end, 2):
            assert line_311(code.co_linetable, code.co_firstlineno, offset // 2) == (line or 0)
            checked += 1
    assert checked > 10


def test_line_310_table():
    # (byte delta, line delta): 0-6 line +0, 6-10 line +2, 10-14 no line, 14-20 line +1
    table = bytes([6, 0, 4, 2, 4, 0x80, 6, 1])
    assert [line_310(table, 10, off) for off in (0, 4, 6, 8, 10, 14, 18)] == [
        10,
        10,
        12,
        12,
        0,
        13,
        13,
    ]


def test_debug_offsets_blob_overrides_the_table():
    words = [0] * 48
    words[5], words[9], words[21], words[23], words[25] = 111, 222, 8, 72, 160
    words[29], words[30], words[31], words[33] = 8, 0, 56, 70
    words[35], words[37], words[38], words[39], words[43] = 112, 128, 136, 68, 999
    blob = b"xdebugpy" + struct.pack("<47Q", *words[1:])
    got = cpython_layout.from_debug_offsets(blob, L313)
    assert got is not None
    assert (got.runtime_interpreters_head, got.interp_threads_head, got.code_adaptive) == (
        111,
        222,
        999,
    )
    assert got.code_firsttraceable == L313.code_firsttraceable  # not published: the table's
    assert cpython_layout.from_debug_offsets(b"\0" * 400, L313) is None


def test_version_from_paths():
    assert cpython_layout.version_of("/usr/bin/python3.11") == (3, 11)
    assert cpython_layout.version_of("/x/lib/libpython3.13.so.1.0") == (3, 13)
    assert cpython_layout.version_of("/usr/lib/libpython3.12d.so") == (3, 12)
    assert cpython_layout.version_of("/usr/bin/pythonista") is None


def test_a_table_that_is_not_the_code_objects_gives_line_0_not_a_huge_number():
    """A line table read from freed memory decodes to anything; once it gave a line below
    -2**63, which no store column holds, and the whole batch was refused."""
    # long form (code 14) with a line delta whose varint runs on: -(huge)
    garbage = bytes([0x80 | (14 << 3)]) + bytes([0x7F] * 20) + bytes([0x01, 0, 0, 0])
    assert line_311(garbage, 1, 0) == 0
    # a short run that still lands above a C int
    big = bytes([0x80 | (14 << 3), 0x7E, 0x7F, 0x7F, 0x7F, 0x7F, 0x3F, 0, 0, 0])
    assert line_311(big, 1, 0) == 0
    # 3.10: a first line near a C int's top, then +127 a hundred times, is no line either
    assert line_310(bytes([0, 127] * 100 + [2, 0]), (1 << 31) - 10, 0) == 0
