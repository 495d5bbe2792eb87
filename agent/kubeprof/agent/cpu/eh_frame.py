"""Unwind rules from an ELF's .eh_frame (x86-64): how to find a caller without frame pointers.

CPython on these machines is built without frame pointers, so native frames above the
leaf are found the way debuggers and `perf --call-graph dwarf` find them: the
.eh_frame_hdr search table gives the FDE covering an address, and running its CFA
program up to that address gives the canonical frame address (CFA) rule and where the
return address and rbp were saved. Only the rules real code uses are kept: CFA =
rsp/rbp + offset, the PLT stub expression, GCC's stack realignment through a DRAP register
(CFA = *(rbp + k), rbp saved at rbp + k': numpy's AVX-512 loops, any function with an
over-aligned local and a variable-length array), and saved-at-offset registers; anything
else ends the unwind (the caller then has what was found up to there). The outermost
frame (`_start`, `clone3`: return address undefined) has the END rule, so a walk that
reached the thread's first frame is told from one that stopped early.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

from kubeprof.leb128 import read_sleb128, read_uleb128

RSP, RBP, RA = 7, 6, 16  # DWARF register numbers on x86-64
PLT = -1  # cfa_reg marker: the standard PLT stub CFA expression
RBP_DEREF = -3  # cfa_reg marker: CFA = *(rbp + cfa_off), GCC's DRAP realignment
END = -4  # cfa_reg marker: the thread's first frame (return address undefined)
_UNSUPPORTED = -2  # cfa_reg marker: a CFA expression of another shape
_RBP_AT_BP = -6  # pseudo register: rbp saved at rbp + offset (DW_CFA_expression breg6)
_DW_OP_BREG6, _DW_OP_DEREF = 0x76, 0x06


@dataclass(frozen=True, slots=True)
class Rule:
    """At one address: CFA = reg + offset; RA and rbp saved at CFA + offset (None: kept).

    With `rbp_from_bp` rbp was saved at rbp + rbp_off instead (a realigned frame, whose
    distance from rbp to the CFA is only known at run time)."""

    cfa_reg: int
    cfa_off: int
    ra_off: int | None
    rbp_off: int | None
    rbp_from_bp: bool = False


END_RULE = Rule(END, 0, None, None)  # the outermost frame: the walk is complete there


def _breg6(expr: bytes) -> tuple[int, int] | None:
    """(offset, length) of an expression starting with DW_OP_breg6 (rbp + offset)."""
    if not expr or expr[0] != _DW_OP_BREG6:
        return None
    off, j = read_sleb128(expr, 1)
    return off, j


# DW_EH_PE value formats of a fixed width: absptr, udata2/4/8, sdata2/4/8 (little-endian).
_FIXED_WIDTH = {
    fmt: struct.Struct(code)
    for fmt, code in (
        (0x00, "<Q"),
        (0x02, "<H"),
        (0x03, "<I"),
        (0x04, "<Q"),
        (0x0A, "<h"),
        (0x0B, "<i"),
        (0x0C, "<q"),
    )
}


def _encoded(d: bytes, i: int, enc: int, base_pc: int) -> tuple[int, int]:
    """A DW_EH_PE-encoded pointer at d[i]; base_pc is the address of d[i] (pcrel)."""
    fmt = enc & 0x0F
    fixed = _FIXED_WIDTH.get(fmt)
    if fixed is not None:
        (v,), n = fixed.unpack_from(d, i), fixed.size
    elif fmt == 0x01:
        v, j = read_uleb128(d, i)
        n = j - i
    elif fmt == 0x09:
        v, j = read_sleb128(d, i)
        n = j - i
    else:
        raise ValueError(f"pointer encoding {enc:#x}")
    if enc & 0x70 == 0x10:
        v += base_pc
    return v & 0xFFFFFFFFFFFFFFFF, i + n


@dataclass(slots=True)
class _Cie:
    code_align: int
    data_align: int
    ra_reg: int
    fde_enc: int
    initial: bytes


class EhFrame:
    """The unwind table of one ELF file (addresses are link-time virtual addresses)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._eh_vaddr, self._eh_off = 0, 0
        self._starts: list[int] = []
        self._fdes: list[int] = []  # file offsets of FDEs, parallel to _starts
        self._cies: dict[int, _Cie] = {}
        self._tables: dict[int, tuple[list[int], list[Rule | None], int]] = {}
        self._load()

    def _load(self) -> None:
        d = self._data
        if d[:4] != b"\x7fELF":
            return
        (shoff,) = struct.unpack_from("<Q", d, 40)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 58)
        secs = [struct.unpack_from("<IIQQQQ", d, shoff + i * shentsize) for i in range(shnum)]
        if not secs:
            return
        names_off = secs[shstrndx][4]

        def name(s: tuple[int, ...]) -> bytes:
            start = names_off + s[0]
            return d[start : d.index(b"\0", start)]

        by_name = {name(s): s for s in secs}
        hdr, eh = by_name.get(b".eh_frame_hdr"), by_name.get(b".eh_frame")
        if hdr is None or eh is None:
            return
        self._eh_vaddr, self._eh_off = eh[3], eh[4]
        h_vaddr, h_off = hdr[3], hdr[4]
        _ver, _ptr_enc, count_enc, table_enc = d[h_off : h_off + 4]
        i = h_off + 4
        _, i = _encoded(d, i, d[h_off + 1], h_vaddr + 4)  # eh_frame_ptr
        count, i = _encoded(d, i, count_enc, h_vaddr + (i - h_off))
        if table_enc != 0x3B:  # datarel | sdata4: what every linker writes
            return
        table = struct.unpack_from(f"<{2 * count}i", d, i)
        self._starts = [h_vaddr + table[2 * k] for k in range(count)]
        self._fdes = [
            h_vaddr + table[2 * k + 1] - self._eh_vaddr + self._eh_off for k in range(count)
        ]

    def _cie(self, off: int) -> _Cie:
        if off in self._cies:
            return self._cies[off]
        d = self._data
        (length,) = struct.unpack_from("<I", d, off)
        end = off + 4 + length
        i = off + 8
        version = d[i]
        i += 1
        aug_end = d.index(b"\0", i)
        aug = d[i:aug_end].decode()
        i = aug_end + 1
        code_align, i = read_uleb128(d, i)
        data_align, i = read_sleb128(d, i)
        if version == 1:
            ra_reg, i = d[i], i + 1
        else:
            ra_reg, i = read_uleb128(d, i)
        fde_enc = 0
        if aug.startswith("z"):
            aug_len, i = read_uleb128(d, i)
            j = i
            for ch in aug[1:]:
                if ch == "R":
                    fde_enc = d[j]
                    j += 1
                elif ch == "P":
                    penc = d[j]
                    _, j = _encoded(d, j + 1, penc, 0)
                elif ch == "L":
                    j += 1
            i += aug_len
        cie = _Cie(code_align, data_align, ra_reg, fde_enc, d[i:end])
        self._cies[off] = cie
        return cie

    def rule(self, vaddr: int) -> Rule | None:
        """The unwind rule at a link-time address, or None (no FDE, or an unusual rule)."""
        row = self.row(vaddr)
        return row[2] if row is not None else None

    def row(self, vaddr: int) -> tuple[int, int, Rule | None] | None:
        """(lo, hi, rule): the rule at vaddr and the addresses [lo, hi) it holds for
        (one row of the FDE's table), or None where no FDE covers vaddr. A function's
        body is one or a few rows, so callers cache rows, not addresses."""
        k = bisect.bisect_right(self._starts, vaddr) - 1
        if k < 0:
            return None
        table = self._tables.get(k)
        if table is None:
            try:
                table = self._table(self._fdes[k])
            except (ValueError, IndexError, struct.error):
                table = ([], [], 0)
            self._tables[k] = table
        locs, rules, end = table
        i = bisect.bisect_right(locs, vaddr) - 1
        if i < 0 or vaddr >= end:
            return None
        hi = min(locs[i + 1] if i + 1 < len(locs) else end, end)
        if k + 1 < len(self._starts):
            hi = min(hi, self._starts[k + 1])
        return locs[i], hi, rules[i]

    def _table(self, fde: int) -> tuple[list[int], list[Rule | None], int]:
        """Every row of one FDE's CFA program: (row start addresses, rules, FDE end).

        Built once per function, so a leaf address never seen before (the hot loop of
        the interpreter moves every sample) costs a bisection, not a CFA program run.
        """
        d = self._data
        (length,) = struct.unpack_from("<I", d, fde)
        if length in (0, 0xFFFFFFFF):
            return [], [], 0
        end = fde + 4 + length
        (cie_ptr,) = struct.unpack_from("<I", d, fde + 4)
        cie = self._cie(fde + 4 - cie_ptr)
        i = fde + 8
        pc_vaddr = i - self._eh_off + self._eh_vaddr
        start, i = _encoded(d, i, cie.fde_enc, pc_vaddr)
        size, i = _encoded(d, i, cie.fde_enc & 0x0F, 0)
        aug_len, i = read_uleb128(d, i)
        i += aug_len
        state = _State(cie, start)
        state.run(cie.initial, initial=True)
        state.rows.clear()
        state.run(d[i:end])
        state.rows.append((state.loc, state.result()))
        locs = [loc for loc, _ in state.rows]
        rules = [rule for _, rule in state.rows]
        return locs, rules, start + size


class _State:
    """The CFA program interpreter, for the registers an x86-64 unwind needs."""

    def __init__(self, cie: _Cie, start: int) -> None:
        self.cie = cie
        self.loc = start
        self.cfa_reg, self.cfa_off = RSP, 8
        self.regs: dict[int, int | None] = {}  # reg -> CFA offset; None: undefined/odd
        self.initial: dict[int, int | None] = {}
        self.stack: list[tuple[int, int, dict[int, int | None]]] = []
        self.outermost = False
        self.rows: list[tuple[int, Rule | None]] = []  # (address the row starts at, rule)

    def _advance(self, loc: int) -> None:
        if loc != self.loc:
            self.rows.append((self.loc, self.result()))
        self.loc = loc

    def run(self, prog: bytes, initial: bool = False) -> None:
        cie, i, n = self.cie, 0, len(prog)
        while i < n:
            op = prog[i]
            i += 1
            hi, lo = op & 0xC0, op & 0x3F
            if hi == 0x40:  # advance_loc
                self._advance(self.loc + lo * cie.code_align)
                continue
            if hi == 0x80:  # offset
                v, i = read_uleb128(prog, i)
                self._set(lo, v * cie.data_align)
                continue
            if hi == 0xC0:  # restore
                self._restore(lo)
                continue
            if op in (0x02, 0x03, 0x04):  # advance_loc1/2/4
                fmt = {0x02: "<B", 0x03: "<H", 0x04: "<I"}[op]
                (delta,) = struct.unpack_from(fmt, prog, i)
                i += struct.calcsize(fmt)
                self._advance(self.loc + delta * cie.code_align)
            elif op == 0x01:  # set_loc
                (loc,) = struct.unpack_from("<Q", prog, i)
                i += 8
                self._advance(loc)
            elif op == 0x00:  # nop
                pass
            elif op in (0x05, 0x11):  # offset_extended(_sf)
                reg, i = read_uleb128(prog, i)
                if op == 0x05:
                    v, i = read_uleb128(prog, i)
                else:
                    v, i = read_sleb128(prog, i)
                self._set(reg, v * cie.data_align)
            elif op == 0x06:  # restore_extended
                reg, i = read_uleb128(prog, i)
                self._restore(reg)
            elif op in (0x07, 0x08):  # undefined, same_value
                reg, i = read_uleb128(prog, i)
                self._set(reg, None)
                if op == 0x07 and reg == RA:
                    self.outermost = True  # _start, clone3: nothing called this frame
                elif op == 0x08:
                    self.regs.pop(reg, None)
            elif op == 0x09:  # register
                reg, i = read_uleb128(prog, i)
                _, i = read_uleb128(prog, i)
                self._set(reg, None)
            elif op == 0x0A:  # remember_state
                self.stack.append((self.cfa_reg, self.cfa_off, dict(self.regs)))
            elif op == 0x0B:  # restore_state
                if self.stack:
                    self.cfa_reg, self.cfa_off, self.regs = self.stack.pop()
            elif op == 0x0C:  # def_cfa
                self.cfa_reg, i = read_uleb128(prog, i)
                self.cfa_off, i = read_uleb128(prog, i)
            elif op == 0x12:  # def_cfa_sf
                self.cfa_reg, i = read_uleb128(prog, i)
                v, i = read_sleb128(prog, i)
                self.cfa_off = v * cie.data_align
            elif op == 0x0D:  # def_cfa_register
                self.cfa_reg, i = read_uleb128(prog, i)
            elif op == 0x0E:  # def_cfa_offset
                self.cfa_off, i = read_uleb128(prog, i)
            elif op == 0x13:  # def_cfa_offset_sf
                v, i = read_sleb128(prog, i)
                self.cfa_off = v * cie.data_align
            elif op == 0x0F:  # def_cfa_expression
                size, i = read_uleb128(prog, i)
                expr = prog[i : i + size]
                i += size
                self._cfa_expression(expr)
            elif op in (0x10, 0x16):  # expression, val_expression
                reg, i = read_uleb128(prog, i)
                size, i = read_uleb128(prog, i)
                expr = prog[i : i + size]
                i += size
                self._set(reg, None)
                rel = _breg6(expr) if op == 0x10 and reg == RBP else None
                if rel is not None and rel[1] == len(expr):  # saved at rbp + k (DRAP)
                    self.regs[_RBP_AT_BP] = rel[0]
            elif op in (0x14, 0x15):  # val_offset(_sf)
                reg, i = read_uleb128(prog, i)
                _, i = (read_uleb128 if op == 0x14 else read_sleb128)(prog, i)
                self._set(reg, None)
            elif op == 0x2E:  # GNU_args_size
                _, i = read_uleb128(prog, i)
            elif op == 0x2F:  # GNU_negative_offset_extended
                reg, i = read_uleb128(prog, i)
                v, i = read_uleb128(prog, i)
                self._set(reg, -v * cie.data_align)
            else:
                raise ValueError(f"CFA op {op:#x}")
        if initial:
            self.initial = dict(self.regs)

    def _set(self, reg: int, value: int | None) -> None:
        self.regs[reg] = value
        if reg == RBP:
            self.regs.pop(_RBP_AT_BP, None)

    def _restore(self, reg: int) -> None:
        self._set(reg, self.initial.get(reg))
        if reg == RBP and _RBP_AT_BP in self.initial:
            self.regs[_RBP_AT_BP] = self.initial[_RBP_AT_BP]

    def _cfa_expression(self, expr: bytes) -> None:
        """The two CFA expressions compilers write: the PLT stub's, rsp + 8 + ((rip & 15)
        >= 11) * 8, and a realigned frame's *(rbp + k); any other ends the unwind."""
        if expr[:2] == b"\x77\x08":
            self.cfa_reg = PLT
            return
        rel = _breg6(expr)
        if rel is not None and expr[rel[1] :] == bytes([_DW_OP_DEREF]):
            self.cfa_reg, self.cfa_off = RBP_DEREF, rel[0]
        else:
            self.cfa_reg = _UNSUPPORTED

    def result(self) -> Rule | None:
        if self.outermost:
            return END_RULE
        if self.cfa_reg not in (RSP, RBP, PLT, RBP_DEREF):
            return None
        ra = self.regs.get(self.cie.ra_reg, -8)
        if ra is None:
            return None
        at_bp = self.regs.get(_RBP_AT_BP)
        if at_bp is not None:
            return Rule(self.cfa_reg, self.cfa_off, ra, at_bp, rbp_from_bp=True)
        return Rule(self.cfa_reg, self.cfa_off, ra, self.regs.get(RBP))
