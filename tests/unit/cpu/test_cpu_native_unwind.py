"""The .eh_frame reader on a real binary, and the stack walk on a hand-made stack."""

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from kubeprof.agent.cpu import btf
from kubeprof.agent.cpu.collector import _cut
from kubeprof.agent.cpu.eh_frame import END_RULE, PLT, RBP, RBP_DEREF, RSP, EhFrame, Rule
from kubeprof.agent.cpu.elf import read_symbols
from kubeprof.agent.cpu.native_unwind import unwind

PYTHON = "/usr/bin/python3.11"
HAZARDS = Path(__file__).resolve().parents[2] / "fixtures" / "cpu" / "unwind_hazards.c"


def _start_of(path, function):
    """(the function's link-time address, the file's unwind tables)."""
    elf = read_symbols(str(path))
    return elf.starts[elf.names.index(function)], EhFrame(Path(path).read_bytes())


@pytest.mark.skipif(not Path(PYTHON).exists(), reason="Debian's python3.11 not installed")
def test_rules_at_a_function_entry_and_after_its_pushes():
    start, eh = _start_of(PYTHON, "_PyEval_EvalFrameDefault")
    assert eh.rule(start) == Rule(RSP, 8, -8, None)  # nothing pushed yet
    rules = [eh.rule(start + k) for k in range(0, 40)]
    offsets = [r.cfa_off for r in rules if r is not None and r.cfa_reg == RSP]
    assert offsets == sorted(offsets) and offsets[-1] > 8  # pushes grow the CFA offset
    assert eh.rule(0) is None


def _stack(base, words):
    return base, b"".join(struct.pack("<Q", w) for w in words)


def test_unwind_follows_rsp_and_rbp_rules_and_stops_outside_the_copy():
    base = 0x7FFF0000
    # leaf f: CFA = rsp + 16 (one push), RA at CFA-8; caller g: CFA = rbp + 16, rbp saved
    # at CFA-16; g's caller h has no rule: the walk ends after naming it.
    words = [0xAAAA, 0x402000, 0x0, 0x0, base + 0x30, 0x403000]
    rules = {0x401000: Rule(RSP, 16, -8, None), 0x401FFF: Rule(RBP, 16, -8, -16)}
    _, stack = _stack(base, words)
    pcs = unwind((0x401000, base, base + 0x20), stack, rules.get)
    assert pcs == [0x401000, 0x402000, 0x403000]


def test_unwind_reads_slots_off_the_word_grid_and_not_past_the_copy():
    # The fast path reads 8-byte words from sp; a frame pointer off that grid (hand-made
    # code may keep one) must walk the same, and a slot half outside the copy is not read.
    base = 0x7FFF0000
    rules = {0x401000: Rule(RSP, 16, -8, None), 0x401FFF: Rule(RBP, 16, -8, -16)}
    stack = bytearray(0x40)
    struct.pack_into("<Q", stack, 0x08, 0x402000)  # f's return address at CFA-8
    struct.pack_into("<Q", stack, 0x24, 0x403000)  # g's, at rbp+8: off the grid
    regs = (0x401000, base, base + 0x1C)
    assert unwind(regs, bytes(stack), rules.get) == [0x401000, 0x402000, 0x403000]
    assert unwind(regs, bytes(stack[:0x2B]), rules.get) == [0x401000, 0x402000]
    assert unwind(regs, bytes(stack[:0x2C]), rules.get) == [0x401000, 0x402000, 0x403000]


def test_unwind_plt_and_broken_chains():
    base = 0x401000
    stack = struct.pack("<QQ", 0x405000, 0)
    plt = {0x400400: Rule(PLT, 0, -8, None)}  # at a PLT stub's start: CFA = rsp + 8
    assert unwind((0x400400, base, 0), stack, plt.get) == [0x400400, 0x405000]
    assert unwind((0, base, 0), stack, plt.get) == []
    loop = {0x400400: Rule(RSP, 0, -8, None)}  # CFA not above sp: refuse to loop
    assert unwind((0x400400, base, 0), stack, loop.get) == [0x400400]


@pytest.mark.skipif(not Path("/sys/kernel/btf/vmlinux").exists(), reason="no kernel BTF")
def test_fsbase_offset_from_kernel_btf():
    path = "/sys/kernel/btf/vmlinux"
    off = btf.fsbase_offset(path)
    assert off == btf.member_offset(path, "task_struct", ["thread"]) + btf.member_offset(
        path, "thread_struct", ["fsbase"]
    )
    assert off > 0 and off % 8 == 0
    # mm_struct keeps start_stack inside an anonymous struct (6.2+): found through it
    mm, start_stack = btf.start_stack_offsets(path)
    assert mm > 0 and mm % 8 == 0 and start_stack > 0 and start_stack % 8 == 0
    with pytest.raises(btf.BtfError, match="no member nope"):
        btf.member_offset(path, "task_struct", ["nope"])


def _chain_stack():
    """leaf f (CFA = rsp+16) <- g (CFA = rsp+32) <- h (CFA = rsp+16) <- root (no rule)."""
    base = 0x7FFF0000
    words = [0x1111, 0x402005, 0xAAAA, 0xBBBB, 0xCCCC, 0x403005, 0xDDDD, 0x404005]
    rules = {
        0x401000: Rule(RSP, 16, -8, None),
        0x401001: Rule(RSP, 16, -8, None),
        0x402004: Rule(RSP, 32, -8, None),
        0x403004: Rule(RSP, 16, -8, None),
    }
    return base, words, rules


def _pack(words):
    return b"".join(struct.pack("<Q", w) for w in words)


def test_memo_reuses_the_callers_walk_and_only_while_the_words_read_are_the_same():
    base, words, rules = _chain_stack()
    calls = []

    def rule_at(addr):
        calls.append(addr)
        return rules.get(addr)

    memo: dict = {}
    want = [0x401000, 0x402005, 0x403005, 0x404005]
    assert unwind((0x401000, base, 0), _pack(words), rule_at, memo) == want
    assert len(memo) == 1
    calls.clear()
    # Another leaf address, and g's local variables changed: the callers' walk is reused
    # (only the leaf's rule is looked up).
    words2 = [0x9999, 0x402005, 0x1234, 0x5678, 0x9ABC, 0x403005, 0xDDDD, 0x404005]
    assert unwind((0x401001, base, 0), _pack(words2), rule_at, memo) == [0x401001, *want[1:]]
    assert calls == [0x401001]
    # A different caller of h (its return address slot changed): walked again, not reused.
    words3 = [0x1111, 0x402005, 0xAAAA, 0xBBBB, 0xCCCC, 0x403005, 0xDDDD, 0x405005]
    calls.clear()
    assert unwind((0x401000, base, 0), _pack(words3), rule_at, memo) == [*want[:3], 0x405005]
    assert len(calls) > 1
    # With and without the memo, the same answer.
    assert unwind((0x401000, base, 0), _pack(words3), rules.get) == [*want[:3], 0x405005]


def test_memo_keys_on_bp_where_a_caller_s_cfa_comes_from_it():
    # g's CFA is rbp-based and nothing reloads rbp before it: two samples that differ
    # only in bp must not share a walk.
    base = 0x7FFF0000
    rules = {0x401000: Rule(RSP, 16, -8, None), 0x402004: Rule(RBP, 16, -8, None)}
    words = [0, 0x402005, 0, 0, 0x403005, 0, 0, 0, 0x404005, 0]
    memo: dict = {}
    assert unwind((0x401000, base, base + 0x18), _pack(words), rules.get, memo) == [
        0x401000,
        0x402005,
        0x403005,
    ]
    assert unwind((0x401000, base, base + 0x38), _pack(words), rules.get, memo) == [
        0x401000,
        0x402005,
        0x404005,
    ]


@pytest.mark.skipif(not Path(PYTHON).exists(), reason="Debian's python3.11 not installed")
def test_the_thread_s_first_frame_has_the_end_rule():
    start, eh = _start_of(PYTHON, "_start")
    assert eh.rule(start + 4) is END_RULE  # return address undefined: nothing called it


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_a_realigned_frame_has_its_cfa_and_rbp_rules_from_its_rbp(tmp_path):
    # GCC realigns `realigned` through r10: CFA = *(rbp - 8), rbp saved at rbp + 0
    lib = tmp_path / "libhazards.so"
    cmd = ["gcc", "-O2", "-fomit-frame-pointer", "-shared", "-fPIC", "-o", str(lib), str(HAZARDS)]
    subprocess.run(cmd, check=True)
    start, eh = _start_of(lib, "realigned")
    body = [eh.rule(a) for a in range(start, start + 96)]
    drap = [r for r in body if r is not None and r.cfa_reg == RBP_DEREF]
    assert drap, body
    assert all(r.ra_off == -8 and r.rbp_from_bp and r.rbp_off == 0 for r in drap)
    assert drap[0].cfa_off < 0


def test_unwind_through_a_realigned_frame():
    # leaf f: CFA = rsp + 16; g realigned its stack: CFA = *(rbp - 8), RA at CFA - 8, the
    # caller's rbp at rbp + 0; g's caller h: CFA = rbp + 16 with that reloaded rbp.
    base = 0x7FFF0000
    # g's rbp is base + 0x28: its CFA (base + 0x40) at rbp - 8, h's rbp (base + 0x50) at rbp
    words = [0, 0x402005, 0, 0, base + 0x40, base + 0x50, 0, 0x403005, 0, 0, 0, 0x404005]
    rules = {
        0x401000: Rule(RSP, 16, -8, None),
        0x402004: Rule(RBP_DEREF, -8, -8, 0, rbp_from_bp=True),
        0x403004: Rule(RBP, 16, -8, None),
    }
    regs = (0x401000, base, base + 0x28)  # g's rbp: base + 0x28
    assert unwind(regs, _pack(words), rules.get) == [0x401000, 0x402005, 0x403005, 0x404005]
    memo: dict = {}
    assert unwind(regs, _pack(words), rules.get, memo) == [0x401000, 0x402005, 0x403005, 0x404005]
    # Another rbp at g: its CFA comes from another slot (base + 0x18 -> base + 0x48, whose
    # RA slot holds 0: the walk ends there), so the memo must not answer for it
    words[3] = base + 0x48
    regs2 = (0x401000, base, base + 0x20)
    assert unwind(regs2, _pack(words), rules.get) == [0x401000, 0x402005]
    assert unwind(regs2, _pack(words), rules.get, memo) == [0x401000, 0x402005]


def test_a_walk_is_cut_unless_it_ends_at_the_end_rule():
    rules = {0x400FFF: END_RULE, 0x401FFF: Rule(RSP, 16, -8, None)}
    assert _cut([0x402000, 0x401000], rules.get) == ""  # ended at _start
    assert _cut([0x402000, 0x402000], rules.get) == "stack"  # a rule: ran off the copy
    assert _cut([0x402000, 0x409000], rules.get) == "cfi"  # no rule for its last frame
    assert _cut([0x400FFF], rules.get) == ""  # a sample in _start itself
    assert _cut([], rules.get) == ""
