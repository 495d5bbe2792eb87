"""A small ELF64 reader: function symbols (.symtab and .dynsym) and load segments.

Enough to name user-space addresses without a dependency: symbols sorted by address for
bisection, and PT_LOAD segments to turn a file offset (from /proc/PID/maps) into the
virtual address the symbol table speaks.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator
from dataclasses import dataclass

_SHT_SYMTAB = 2
_SHT_DYNSYM = 11
_PT_LOAD = 1
_STT_FUNC = 2
_STT_GNU_IFUNC = 10
_SHT_NOTE = 7
_NT_GNU_BUILD_ID = 3
_SHDR = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr
_SYM = struct.Struct("<IBBHQQ")  # Elf64_Sym


class ElfError(ValueError):
    """Not an ELF file this reader understands (32-bit, big-endian, truncated)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """A PT_LOAD program header: file bytes [offset, offset+filesz) load at vaddr."""

    offset: int
    vaddr: int
    filesz: int


@dataclass(slots=True)
class ElfSymbols:
    """Function symbols of one ELF file, sorted by start address."""

    path: str
    starts: list[int]
    ends: list[int]  # start + size, or the next symbol's start when size is 0
    names: list[str]
    segments: list[Segment]
    is_dyn: bool  # ET_DYN (shared object or PIE): mapped at a load bias
    build_id: str = ""  # hex of the NT_GNU_BUILD_ID note
    debuglink: str = ""  # file name in .gnu_debuglink

    def file_offset_to_vaddr(self, offset: int) -> int | None:
        """The link-time address of a file offset, via the PT_LOAD that holds it."""
        for seg in self.segments:
            if seg.offset <= offset < seg.offset + max(seg.filesz, 1):
                return offset - seg.offset + seg.vaddr
        return None

    def lookup(self, vaddr: int) -> str | None:
        """The function containing vaddr, or None."""
        found = self.symbol(vaddr)
        return found[2] if found is not None else None

    def symbol(self, vaddr: int) -> tuple[int, int, str] | None:
        """(lo, hi, name): the function containing vaddr and the addresses [lo, hi)
        that `lookup` names the same (up to the next symbol's start), or None."""
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i < 0 or vaddr >= self.ends[i]:
            return None
        hi = self.ends[i]
        if i + 1 < len(self.starts):
            hi = min(hi, self.starts[i + 1])
        return self.starts[i], hi, self.names[i]


def read_symbols(path: str, open_path: str | None = None) -> ElfSymbols:
    """Parse the ELF at open_path (default path); raise ElfError or OSError."""
    with open(open_path or path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF":
        raise ElfError(f"{path}: not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ElfError(f"{path}: only 64-bit little-endian ELF is supported")
    try:
        return _parse(path, data)
    except struct.error as e:
        raise ElfError(f"{path}: truncated ELF ({e})") from e


def parse_symbols(path: str, data: bytes) -> ElfSymbols:
    """`read_symbols` of an ELF image already in memory (the vDSO); raise ElfError."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ElfError(f"{path}: not a 64-bit little-endian ELF image")
    try:
        return _parse(path, data)
    except struct.error as e:
        raise ElfError(f"{path}: truncated ELF ({e})") from e


def _parse(path: str, data: bytes) -> ElfSymbols:
    (e_type,) = struct.unpack_from("<H", data, 16)
    e_phoff, e_shoff = struct.unpack_from("<QQ", data, 32)
    e_phentsize, e_phnum, e_shentsize, e_shnum = struct.unpack_from("<HHHH", data, 54)

    segments = []
    for i in range(e_phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, e_phoff + i * e_phentsize
        )
        if p_type == _PT_LOAD:
            segments.append(Segment(p_offset, p_vaddr, p_filesz))

    sections = _sections(data, e_shoff, e_shentsize, e_shnum)
    syms: dict[int, tuple[int, str]] = {}
    ranks: dict[int, tuple[int, bool, bool]] = {}
    for start, st_info, st_value, st_size in _symbols(data, sections):
        if st_info & 0xF not in (_STT_FUNC, _STT_GNU_IFUNC):
            continue
        end = data.index(b"\0", start)
        name = data[start:end].decode(errors="replace")
        name = name.split("@", 1)[0]
        # aliases at one address: the larger size, then the exported name, then the
        # one without a leading underscore (qsort_r over __qsort_r)
        rank = (st_size, st_info >> 4 != 0, not name.startswith("_"))
        if st_value not in ranks or ranks[st_value] < rank:
            syms[st_value], ranks[st_value] = (st_size, name), rank

    starts = sorted(syms)
    ends = []
    for i, start in enumerate(starts):
        size = syms[start][0]
        nxt = starts[i + 1] if i + 1 < len(starts) else start + 4096
        ends.append(start + size if size else nxt)
    names = [syms[s][1] for s in starts]
    build_id, debuglink = _debug_refs(data, sections, e_shoff, e_shentsize)
    return ElfSymbols(path, starts, ends, names, segments, e_type == 3, build_id, debuglink)


def _sections(data: bytes, shoff: int, shentsize: int, shnum: int) -> list[tuple[int, ...]]:
    """The section headers (Elf64_Shdr fields, in order)."""
    return [_SHDR.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]


def _symbols(data: bytes, sections: list[tuple[int, ...]]) -> Iterator[tuple[int, int, int, int]]:
    """(offset of its name in data, st_info, st_value, st_size) of each defined symbol with
    a value in .symtab and .dynsym."""
    for _n, sh_type, _f, _a, sh_offset, sh_size, sh_link, _i, _al, sh_entsize in sections:
        if sh_type not in (_SHT_SYMTAB, _SHT_DYNSYM) or not sh_entsize:
            continue
        str_off = sections[sh_link][4]
        for off in range(sh_offset, sh_offset + sh_size, sh_entsize):
            st_name, st_info, _other, st_shndx, st_value, st_size = _SYM.unpack_from(data, off)
            if st_value and st_shndx:
                yield str_off + st_name, st_info, st_value, st_size


def _debug_refs(data: bytes, sections: list, shoff: int, shentsize: int) -> tuple[str, str]:
    """The build id and the .gnu_debuglink file name, where the file has them."""
    build_id = link = ""
    (shstrndx,) = struct.unpack_from("<H", data, 62)
    names_off = sections[shstrndx][4] if shstrndx < len(sections) else 0
    for name_off, sh_type, _fl, _addr, off, size, *_rest in sections:
        if sh_type == _SHT_NOTE and not build_id:
            pos = off
            while pos + 12 <= off + size:
                namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
                desc = pos + 12 + ((namesz + 3) & ~3)
                if ntype == _NT_GNU_BUILD_ID and data[pos + 12 : pos + 15] == b"GNU":
                    build_id = data[desc : desc + descsz].hex()
                    break
                pos = desc + ((descsz + 3) & ~3)
        elif names_off:
            start = names_off + name_off
            if data[start : start + 15] == b".gnu_debuglink\0":
                link = data[off : data.index(b"\0", off)].decode(errors="replace")
    return build_id, link


def debug_file(elf: ElfSymbols, root: str = "/usr/lib/debug") -> str | None:
    """Where the separate debug file of an ELF lies, as gdb looks for it: by build id
    under root/.build-id, then by .gnu_debuglink next to it, in .debug/, under root."""
    import os

    candidates = []
    if len(elf.build_id) > 2:
        candidates.append(f"{root}/.build-id/{elf.build_id[:2]}/{elf.build_id[2:]}.debug")
    if elf.debuglink:
        folder = os.path.dirname(elf.path)
        candidates += [
            f"{folder}/{elf.debuglink}",
            f"{folder}/.debug/{elf.debuglink}",
            f"{root}{folder}/{elf.debuglink}",
        ]
    for c in candidates:
        if c != elf.path and os.path.isfile(c):
            return c
    return None


def with_debug_symbols(main: ElfSymbols, debug: ElfSymbols) -> ElfSymbols:
    """The main file's segments with the union of both symbol tables (debug wins)."""
    syms = {s: (e, n) for s, e, n in zip(main.starts, main.ends, main.names, strict=True)}
    syms |= {s: (e, n) for s, e, n in zip(debug.starts, debug.ends, debug.names, strict=True)}
    starts = sorted(syms)
    return ElfSymbols(
        main.path,
        starts,
        [syms[s][0] for s in starts],
        [syms[s][1] for s in starts],
        main.segments,
        main.is_dyn,
        main.build_id,
        main.debuglink,
    )


def find_symbol(path: str, name: str, open_path: str | None = None) -> int | None:
    """The link-time value of a named symbol of any type (e.g. the `_PyRuntime` object)."""
    with open(open_path or path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    want = name.encode()
    try:
        (e_shoff,) = struct.unpack_from("<Q", data, 40)
        e_shentsize, e_shnum = struct.unpack_from("<HH", data, 58)
        for start, _info, st_value, _size in _symbols(
            data, _sections(data, e_shoff, e_shentsize, e_shnum)
        ):
            if data[start : start + len(want) + 1] == want + b"\0":
                return int(st_value)
    except struct.error:
        return None
    return None
