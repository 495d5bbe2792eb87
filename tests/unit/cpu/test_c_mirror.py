"""The ctypes mirrors are read from the BPF C text: same layout as the kernel's structs,
and a member they cannot mirror is a clear error, not a silently shifted field."""

from __future__ import annotations

import ctypes

import pytest

from kubeprof.agent.cpu import bpf_program, c_mirror, offcpu_probe


def test_the_mirrors_have_the_c_layouts() -> None:
    conf = bpf_program.PyConf
    assert (ctypes.sizeof(conf), conf.interp_threads.offset, conf.code_type.offset) == (64, 8, 56)
    raw = bpf_program.RawSample
    assert raw.comm.size == bpf_program.COMM_LEN
    assert (raw.ustack.offset, raw.kstack.offset, raw.py.offset) == (104, 1120, 2136)
    assert ctypes.sizeof(raw) == 2136 + 24 * bpf_program.MAX_PY  # the stack bytes left out
    assert [n for n, _ in offcpu_probe.OffEntry._fields_] == [
        "start",
        "out",
        "blocked",
        "nr",
        "state",
    ]
    assert offcpu_probe.OffEntry(1, 2, 3, -4, 5).nr == -4  # s64: signed


def test_arrays_take_their_length_from_sizes_or_the_text() -> None:
    text = "struct t {\n    u32 a[N];   /* counted */\n    char b[3];\n};\n"
    got = c_mirror.fields(text, "t", sizes={"N": 2})
    assert [(n, ctypes.sizeof(k)) for n, k in got] == [("a", 8), ("b", 3)]


@pytest.mark.parametrize(
    ("text", "sizes", "says"),
    [
        ("struct t {\n    float x;\n};\n", {}, "struct t.x: type 'float' has no ctypes mirror"),
        ("struct t {\n    u32 a[N];\n};\n", {}, "struct t.a: array length N not in `sizes`"),
        ("struct t {\n    u32 *p;\n};\n", {}, "struct t: cannot mirror the member 'u32 *p'"),
        ("struct u {\n    u32 a;\n};\n", {}, "no `struct t { ... };`"),
    ],
)
def test_what_cannot_be_mirrored_is_named(text: str, sizes: dict[str, int], says: str) -> None:
    with pytest.raises(ValueError) as err:
        c_mirror.fields(text, "t", sizes=sizes)
    assert says in str(err.value)
