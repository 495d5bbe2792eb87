"""Native frames from a copy of the user stack: a .eh_frame unwind, as perf's DWARF mode.

The BPF program sends the user registers (ip, sp, bp) and the stack bytes from sp up;
here each frame's rule (eh_frame.Rule, looked up by the caller for the frame's address)
says where its caller's return address and rbp are. Pure: no /proc access, so it is
unit-tested on hand-made stacks.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable

from kubeprof.agent.cpu.eh_frame import PLT, RBP, RSP, Rule

MAX_FRAMES = 128


def unwind(
    regs: tuple[int, int, int], stack: bytes, rule_at: Callable[[int], Rule | None]
) -> list[int]:
    """Instruction addresses leaf first (the leaf exact, callers as return addresses).

    Stops where a rule is missing, a read leaves the copied stack, or the chain stops
    going up the stack (a broken frame must not loop).
    """
    ip, sp, bp = regs
    if not ip:
        return []
    base, end = sp, sp + len(stack)
    # Saved slots are 8-byte aligned when sp is (always, past a call): read them as one
    # memoryview of words, the hot path of every sample; unpack_from covers odd offsets.
    top = len(stack) & ~7
    words = memoryview(stack)[:top].cast("Q") if sys.byteorder == "little" else None
    out = [ip]

    def read(addr: int) -> int | None:
        off = addr - base
        if off < 0 or addr + 8 > end:
            return None
        return int(struct.unpack_from("<Q", stack, off)[0])

    for depth in range(MAX_FRAMES - 1):
        rule = rule_at(ip if depth == 0 else ip - 1)
        if rule is None:
            break
        if rule.cfa_reg == RSP:
            cfa = sp + rule.cfa_off
        elif rule.cfa_reg == RBP:
            cfa = bp + rule.cfa_off
        elif rule.cfa_reg == PLT:
            cfa = sp + 8 + (8 if (ip & 15) >= 11 else 0)
        else:
            break
        ra = None
        if rule.ra_off is not None:
            off = cfa + rule.ra_off - base
            if words is not None and not off & 7 and 0 <= off < top:
                ra = words[off >> 3]  # the common case, inline
            else:
                ra = read(cfa + rule.ra_off)
        if rule.rbp_off is not None:
            # Below sp (an epilogue past its `pop rbp`, which GCC does not mark with a
            # restore rule) the register already holds the caller's value.
            off = cfa + rule.rbp_off - base
            if words is not None and not off & 7 and 0 <= off < top:
                bp = words[off >> 3]
            else:
                saved = read(cfa + rule.rbp_off)
                bp = saved if saved is not None else bp
        if not ra or cfa <= sp:
            break
        sp, ip = cfa, ra
        out.append(ip)
    return out
