"""Native frames from a copy of the user stack: a .eh_frame unwind, as perf's DWARF mode.

The BPF program sends the user registers (ip, sp, bp) and the stack bytes from sp up;
here each frame's rule (eh_frame.Rule, looked up by the caller for the frame's address)
says where its caller's return address and rbp are. Pure: no /proc access, so it is
unit-tested on hand-made stacks.

Samples of one thread mostly differ only in their leaf: the callers' frames sit still
while the leaf runs. A `Memo` keeps, per state after the leaf's step (caller ip, sp,
end of the copy), the callers found and the stack words that walk read; a later sample
reaching the same state with the same words read walks the same way, so the result is
taken after one C-level comparison of those words instead of a Python step per frame.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import NamedTuple

from kubeprof.agent.cpu.eh_frame import PLT, RBP, RBP_DEREF, RSP, Rule

MAX_FRAMES = 128
_REST = MAX_FRAMES - 2  # callers after the leaf's own
_MEMO_MAX = 4096  # states remembered per process (dropped whole past this)
_LOWEST_CODE = 0x10000  # vm.mmap_min_addr's default: nothing executable lies below
_LITTLE = sys.byteorder == "little"


@dataclass(frozen=True, slots=True)
class _Chain:
    """The walk from one state: the callers it found and what it depended on."""

    bp: int | None  # the bp it used as a CFA base before reloading rbp (None: unused)
    words: Callable[[memoryview], object] | None  # the stack words it read, from sp
    values: object  # words() of the stack it was found on
    pcs: tuple[int, ...]  # the callers found, nearest first


Memo = dict[tuple[int, int, int], _Chain]  # (ip, sp, end of the copy) -> walk from there


def unwind(
    regs: tuple[int, int, int],
    stack: bytes | memoryview,
    rule_at: Callable[[int], Rule | None],
    memo: Memo | None = None,
) -> list[int]:
    """Instruction addresses leaf first (the leaf exact, callers as return addresses).

    Stops where a rule is missing, a read leaves the copied stack, or the chain stops
    going up the stack (a broken frame must not loop). With a `memo` (one per process:
    rules depend on its mappings) the callers' walk is remembered and reused.
    """
    ip, sp, bp = regs
    if not ip:
        return []
    base, end = sp, sp + len(stack)
    # Saved slots are 8-byte aligned when sp is (always, past a call): read them as one
    # memoryview of words, the hot path of every sample; unpack_from covers odd offsets.
    top = len(stack) & ~7
    words = memoryview(stack)[:top].cast("Q") if _LITTLE else None
    first = _walk(ip, sp, bp, stack, words, base, rule_at, 1, None, exact=True)
    out = [ip, *first.pcs]
    if not first.pcs:
        return out
    if memo is None or words is None or (first.sp - base) & 7:
        out += _walk(first.ip, first.sp, first.bp, stack, words, base, rule_at, _REST, None).pcs
        return out
    key = (first.ip, first.sp, end)
    view = words[(first.sp - base) >> 3 :]
    chain = memo.get(key)
    if chain is not None and _same(chain, first.bp, view):
        out += chain.pcs
        return out
    read: list[int] = []
    rest = _walk(first.ip, first.sp, first.bp, stack, words, base, rule_at, _REST, read)
    out += rest.pcs
    if rest.memoizable:
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        getter = itemgetter(*read) if read else None
        memo[key] = _Chain(
            first.bp if rest.used_bp else None,
            getter,
            getter(view) if getter else None,
            tuple(rest.pcs),
        )
    return out


def _same(chain: _Chain, bp: int, view: memoryview) -> bool:
    """Whether walking from here would read what `chain`'s walk read."""
    if chain.bp is not None and chain.bp != bp:
        return False
    try:
        return chain.words is None or chain.words(view) == chain.values
    except IndexError:  # a shorter copy than the chain's (its key says same end): no reuse
        return False


class _Walk(NamedTuple):
    pcs: list[int]
    ip: int
    sp: int
    bp: int
    used_bp: bool  # a CFA was computed from the starting bp
    memoizable: bool  # every read was an aligned word inside the copy, recorded


def _walk(
    ip: int,
    sp: int,
    bp: int,
    stack: bytes | memoryview,
    words: memoryview | None,
    base: int,
    rule_at: Callable[[int], Rule | None],
    limit: int,
    read: list[int] | None,
    exact: bool = False,
) -> _Walk:
    """Up to `limit` callers of the frame at (ip, sp, bp); `ip` is the exact leaf
    address with `exact`, else a return address (its rule is the call's, one byte
    before). With `read`, the word index (from the starting sp) of every slot read is
    appended to it."""
    end = base + len(stack)
    top = len(stack) & ~7
    start, pcs = sp, []
    used_bp, bp_live, memoizable = False, True, read is not None

    def slot(addr: int) -> int | None:
        nonlocal memoizable
        off = addr - base
        if words is not None and not off & 7 and 0 <= off < top:
            if read is not None:
                if addr < start:
                    memoizable = False  # below the state it would be keyed on
                read.append((addr - start) >> 3)
            return int(words[off >> 3])
        memoizable = False
        if off < 0 or addr + 8 > end:
            return None
        return int(struct.unpack_from("<Q", stack, off)[0])

    for _ in range(limit):
        rule = rule_at(ip if exact else ip - 1)
        exact = False
        if rule is None:
            break
        if rule.cfa_reg == RSP:
            cfa = sp + rule.cfa_off
        elif rule.cfa_reg == RBP:
            cfa = bp + rule.cfa_off
            used_bp = used_bp or bp_live
        elif rule.cfa_reg == PLT:
            cfa = sp + 8 + (8 if (ip & 15) >= 11 else 0)
        elif rule.cfa_reg == RBP_DEREF:  # a realigned frame keeps its CFA at rbp + k
            used_bp = used_bp or bp_live
            found = slot(bp + rule.cfa_off)
            if found is None:
                break
            cfa = found
        else:
            break  # no usable rule, or END: the thread's first frame
        ra = slot(cfa + rule.ra_off) if rule.ra_off is not None else None
        if rule.rbp_off is not None:
            # Below sp (an epilogue past its `pop rbp`, which GCC does not mark with a
            # restore rule) the register already holds the caller's value.
            if rule.rbp_from_bp:
                used_bp = used_bp or bp_live
            saved = slot((bp if rule.rbp_from_bp else cfa) + rule.rbp_off)
            if saved is not None:
                bp, bp_live = saved, False
        if ra is None or ra < _LOWEST_CODE or cfa <= sp:
            break  # (a return address below any mapping is a wrong slot, not code)
        sp, ip = cfa, ra
        pcs.append(ip)
    return _Walk(pcs, ip, sp, bp, used_bp, memoizable)
