"""Python frames from the BPF walk: code objects to (qualified name, file, line).

The BPF program hands over, per interpreter frame, the code object's address, the frame's
instruction pointer and its flags. Here they are grouped by `_PyEval_EvalFrameDefault`
invocation (entry frames in 3.11, the C-stack shim frames in 3.12+, one frame per call in
3.10), and named by reading the code object from /proc/PID/mem once per address (cached:
the name, file and line table of a code object do not change while it lives).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from kubeprof.agent.cpython_layout import OWNED_BY_CSTACK, OWNED_BY_GENERATOR, Layout
from kubeprof.model import Frame, FrameKind

RawPyFrame = tuple[int, int, int]  # (code address, instruction pointer/f_lasti, flags)
_USER_TOP = 1 << 47  # x86-64 user addresses lie below
_OB_TYPE = 8  # PyObject_HEAD: ob_refcnt, then ob_type (every supported GIL build)
_CODE_READ = 256  # bytes of a code object read at once: every field we need is below
# CPython keeps line numbers in C ints. A table read from memory the code object no longer
# owns (freed and reused between the sample and our read) can decode to any number, which
# no column stores (seen: -18,744,146,661,623,044,296, and the whole batch was refused):
# such a line is unknown (0).
_MAX_LINE = (1 << 31) - 1


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while i < len(data) and shift < 64:  # longer runs are not a table's: see _MAX_LINE
        b = data[i]
        i += 1
        value |= (b & 63) << shift
        shift += 6
        if not b & 64:
            break
    return value, i


def _plausible(line: int) -> int:
    """`line`, or 0 (unknown) when no CPython line can be it (see _MAX_LINE)."""
    return line if 0 <= line <= _MAX_LINE else 0


def _svarint(data: bytes, i: int) -> tuple[int, int]:
    v, i = _varint(data, i)
    return (-(v >> 1) if v & 1 else v >> 1), i


def line_311(table: bytes, firstlineno: int, unit: int) -> int:
    """The line of code unit `unit` from a 3.11+ location table (Objects/locations.md)."""
    line, i, start = firstlineno, 0, 0
    while i < len(table):
        head = table[i]
        i += 1
        code, length = (head >> 3) & 15, (head & 7) + 1
        delta: int | None = 0
        if code == 15:  # no location
            delta = None
        elif code == 14:  # long form: line delta, end line delta, column, end column
            delta, i = _svarint(table, i)
            for _ in range(3):
                _, i = _varint(table, i)
        elif code == 13:  # no column
            delta, i = _svarint(table, i)
        elif code >= 10:  # one-line form: line delta code-10, two column bytes
            delta, i = code - 10, i + 2
        else:  # short form: same line, one column byte
            i += 1
        if delta is not None:
            line += delta
        if start <= unit < start + length:
            return _plausible(line) if delta is not None else 0
        start += length
    return 0


def line_310(table: bytes, firstlineno: int, byte_offset: int) -> int:
    """The line of a bytecode offset from a 3.10 co_linetable (start delta, line delta)."""
    line, addr = firstlineno, 0
    for i in range(0, len(table) - 1, 2):
        sdelta, ldelta = table[i], struct.unpack_from("b", table, i + 1)[0]
        end = addr + sdelta
        if ldelta != -128:
            line += ldelta
        if addr <= byte_offset < end:
            return _plausible(line) if ldelta != -128 else 0
        addr = end
    return 0


def groups(frames: list[RawPyFrame], layout: Layout) -> list[list[RawPyFrame]]:
    """Frames (innermost first) split per interpreter invocation, innermost group first.

    Each group is what one `_PyEval_EvalFrameDefault` call on the C stack was running.
    The 3.12+ shim frames only mark the boundary and are dropped.
    """
    out: list[list[RawPyFrame]] = []
    cur: list[RawPyFrame] = []
    for f in frames:
        if layout.version <= (3, 10):
            out.append([f])
            continue
        if layout.version >= (3, 12):
            if f[2] & 0xFF == OWNED_BY_CSTACK:
                if cur:
                    out.append(cur)
                cur = []
                continue
            cur.append(f)
        else:
            cur.append(f)
            if f[2] & 0xFF:  # is_entry
                out.append(cur)
                cur = []
    if cur:
        out.append(cur)
    return out


@dataclass(frozen=True, slots=True)
class CodeInfo:
    """What a code object says once read."""

    name: str
    filename: str
    firstlineno: int
    linetable: bytes
    code_start: int  # address of the first code unit (3.11+), 0 for 3.10
    firsttraceable: int


class CodeReader:
    """Reads code objects of one process; `frame()` names one raw frame."""

    def __init__(self, pid: int, layout: Layout) -> None:
        self.pid, self.layout = pid, layout
        self._fd: int | None = None
        self._codes: dict[int, CodeInfo | None] = {}
        self._strings: dict[int, str] = {}
        self._frames: dict[RawPyFrame, Frame | None] = {}
        self._sigs: dict[int, bytes] = {}  # code address -> the words that name it

    def _read(self, addr: int, size: int) -> bytes:
        if not 0 < addr < _USER_TOP:  # a torn read in BPF can hand over any value
            return b""
        if self._fd is None:
            try:
                self._fd = os.open(f"/proc/{self.pid}/mem", os.O_RDONLY)
            except OSError:
                return b""
        try:
            return os.pread(self._fd, size, addr)
        except OSError:
            return b""

    def close(self) -> None:
        """Release the /proc/PID/mem handle (the caches stay usable for late samples)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _string(self, addr: int) -> str:
        if addr in self._strings:
            return self._strings[addr]
        lay = self.layout
        head = self._read(addr, lay.unicode_compact_size)
        if len(head) < lay.unicode_compact_size:
            return "?"
        (length,) = struct.unpack_from("<q", head, 16)
        (state,) = struct.unpack_from("<I", head, 32)
        kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
        if not compact or not 0 <= length < 4096 or kind not in (1, 2, 4):
            return "?"
        if ascii_:
            text = self._read(addr + lay.unicode_ascii_size, length).decode("ascii", "replace")
        else:
            raw = self._read(addr + lay.unicode_compact_size, length * kind)
            codec = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind]
            text = raw.decode(codec, "replace")
        self._strings[addr] = text
        return text

    def _bytes(self, addr: int) -> bytes:
        head = self._read(addr, 32)
        if len(head) < 32:
            return b""
        (size,) = struct.unpack_from("<q", head, 16)
        return self._read(addr + 32, size) if 0 <= size < 1 << 20 else b""

    def code(self, addr: int) -> CodeInfo | None:
        """A code object's name, file and line table (None when unreadable)."""
        if addr in self._codes:
            return self._codes[addr]
        lay = self.layout
        raw = self._read(addr, _CODE_READ)
        info = None
        if len(raw) == _CODE_READ:

            def ptr(off: int) -> int:
                return int(struct.unpack_from("<Q", raw, off)[0])

            (firstlineno,) = struct.unpack_from("<i", raw, lay.code_firstlineno)
            firsttraceable = 0
            if lay.code_firsttraceable >= 0:
                (firsttraceable,) = struct.unpack_from("<i", raw, lay.code_firsttraceable)
            self._sigs[addr] = self._sig(raw)
            info = CodeInfo(
                name=self._string(ptr(lay.code_name)),
                filename=self._string(ptr(lay.code_filename)),
                firstlineno=firstlineno,
                linetable=self._bytes(ptr(lay.code_linetable)),
                code_start=addr + lay.code_adaptive if lay.code_adaptive >= 0 else 0,
                firsttraceable=firsttraceable,
            )
        self._codes[addr] = info
        return info

    def _sig(self, raw: bytes) -> bytes:
        """A code object's type word, name, file and line-table pointers and its first
        line: another code object at the same address differs in the last four."""
        lay = self.layout
        words = (_OB_TYPE, lay.code_name, lay.code_filename, lay.code_linetable)
        first = raw[lay.code_firstlineno : lay.code_firstlineno + 4]
        return b"".join(raw[o : o + 8] for o in words) + first

    def recheck(self, addrs: Iterable[int]) -> bool:
        """Re-read the cached code objects at ``addrs`` (those a poll's samples name); True
        if one is no longer the object cached there.

        A code object freed (exec'd or generated code, a dropped compiled function) can
        have its address reused by another: named from the cache, every later sample of
        the new one would carry the old name for as long as the process lives. A changed
        object's entry, its strings and every cached frame are dropped, so it is read
        again. Run before a poll's samples are named, it leaves one window: samples of the
        old object taken before it was freed and named after can carry the new name."""
        changed = False
        sigs = self._sigs
        for addr in addrs:
            old = sigs.get(addr)
            if old is None:
                continue  # not read yet (or unreadable): read fresh when named
            raw = self._read(addr, _CODE_READ)
            if len(raw) < _CODE_READ or self._sig(raw) == old:
                continue  # unreadable (the process is exiting) or the same object
            if raw[_OB_TYPE : _OB_TYPE + 8] != old[:8]:
                # Freed and not a code object now (the allocator's own words or another
                # type's object): no frame can run it, so the poll's samples of this
                # address ran the old object. Read again, it named them "?" (seen on a
                # program's <module> while the interpreter shut down).
                continue
            del sigs[addr]
            self._codes.pop(addr, None)
            for off in (8, 16):  # the old name's and file's strings may be freed too
                self._strings.pop(int(struct.unpack_from("<Q", old, off)[0]), None)
            changed = True
        if changed:
            self._frames.clear()
        return changed

    def frame(self, raw: RawPyFrame) -> Frame | None:
        """One raw frame as a Python frame; None for frames CPython itself hides
        (3.11+ frames that have not reached their first traceable instruction)."""
        if raw in self._frames:
            return self._frames[raw]
        frame = self._frame(raw)
        if len(self._frames) > 1 << 16:
            self._frames.clear()
        self._frames[raw] = frame
        return frame

    def _frame(self, raw: RawPyFrame) -> Frame | None:
        code_addr, instr, flags = raw
        info = self.code(code_addr)
        if info is None:
            return Frame("[unknown python]", FrameKind.PYTHON, "", 0)
        if self.layout.version <= (3, 10):
            lasti = instr & 0xFFFFFFFF
            lasti = lasti - (1 << 32) if lasti >= 1 << 31 else lasti
            line = line_310(info.linetable, info.firstlineno, max(lasti, 0) * 2)
        else:
            unit = (instr - info.code_start) // 2
            owner = (flags >> 8) & 0xFF if self.layout.version == (3, 11) else flags & 0xFF
            if owner != OWNED_BY_GENERATOR and unit < info.firsttraceable:
                return None
            line = line_311(info.linetable, info.firstlineno, max(unit, 0))
        return Frame(info.name, FrameKind.PYTHON, info.filename, line)
