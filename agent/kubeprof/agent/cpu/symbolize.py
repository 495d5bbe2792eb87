"""Addresses to frames: ELF symbols through /proc/PID/maps, perf maps, and /proc/kallsyms.

A process's maps are read while it lives and cached per pid, so samples drained just
after the process exits still resolve; ELF symbol tables are cached per file (by device,
inode and mtime) because many processes share libc and the interpreter, and so are
.eh_frame tables (each FDE's rows built once): a new process of an interpreter already
seen (every pod of one image on a node, every run of ``kubeprof record``) resolves its
return addresses without parsing a symbol table or an FDE again. Per process, names and
rules are cached per address and per range (a function, an unwind row), so a leaf
address never seen before inside a known function costs one bisection.
"""

from __future__ import annotations

import bisect
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, TypeVar

from kubeprof.agent.cpu.demangle import demangle
from kubeprof.agent.cpu.eh_frame import EhFrame, Rule
from kubeprof.agent.cpu.elf import (
    ElfError,
    ElfSymbols,
    debug_file,
    parse_symbols,
    read_symbols,
    with_debug_symbols,
)
from kubeprof.model import Frame, FrameKind

UNKNOWN = "[unknown]"
_SETTLE_TRIES, _SETTLE_SLEEP_S = 50, 0.001  # at most ~50 ms waiting for exec() to map


@dataclass(frozen=True, slots=True)
class Mapping:
    """One executable line of /proc/PID/maps."""

    start: int
    end: int
    offset: int
    inode: int
    path: str  # "" for anonymous memory (JIT code lives there)


def parse_maps(text: str) -> list[Mapping]:
    """The executable mappings of a /proc/PID/maps text, sorted by start."""
    out = []
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 5 or "x" not in parts[1]:
            continue
        lo, hi = parts[0].split("-")
        path = parts[5].strip() if len(parts) > 5 else ""
        out.append(Mapping(int(lo, 16), int(hi, 16), int(parts[2], 16), int(parts[4]), path))
    out.sort(key=lambda m: m.start)
    return out


@dataclass(slots=True)
class SymbolTable:
    """Sorted (start, end, name) triples: the shape of perf maps and kallsyms."""

    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)

    def lookup(self, addr: int) -> str | None:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.ends[i]:
            return self.names[i]
        return None


def parse_perf_map(text: str) -> SymbolTable:
    """A /tmp/perf-PID.map text ("START SIZE name", hex) as a symbol table.

    Later lines win over earlier ones at the same start, as JITs re-emit code there.
    """
    entries: dict[int, tuple[int, str]] = {}
    for line in text.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) < 3:
            continue
        try:
            start, size = int(parts[0], 16), int(parts[1], 16)
        except ValueError:
            continue
        entries[start] = (start + size, parts[2].strip())
    starts = sorted(entries)
    return SymbolTable(starts, [entries[s][0] for s in starts], [entries[s][1] for s in starts])


_KALLSYMS_TEXT = re.compile(r"^([0-9a-fA-F]+) [tTwW] (\S+)", re.MULTILINE)


def parse_kallsyms(text: str) -> SymbolTable:
    """Text symbols of /proc/kallsyms; empty if addresses are hidden (kptr_restrict).

    A regex over the whole file: ~200,000 lines parse in a fraction of the time a
    per-line split takes, and this runs at the first kernel frame of a session.
    """
    syms = sorted(
        (addr, name)
        for addr, name in ((int(a, 16), n) for a, n in _KALLSYMS_TEXT.findall(text))
        if addr
    )
    starts = [a for a, _ in syms]
    ends = [*starts[1:], starts[-1] + 4096] if starts else []
    return SymbolTable(starts, ends, [n for _, n in syms])


_CACHE_MAX = 1 << 16  # address caches are dropped whole past this size
_USER_LOW, _USER_HIGH = 0x10000, 1 << 47  # vm.mmap_min_addr's default; x86-64 user space

_MISSING = object()
_V = TypeVar("_V")
_FileKey = tuple[int, int, float, str]  # device, inode, mtime, path as mapped
# The vDSO has no file: its image is the kernel's, the same in every process (read from
# this process's own mapping), with its own .eh_frame and symbols (clock_gettime, ...).
VDSO = "[vdso]"
_VDSO_KEY: _FileKey = (0, 0, 0.0, VDSO)


def _has_file(m: Mapping | None) -> bool:
    """Whether a mapping's code can be named and unwound: a file, or the vDSO."""
    return m is not None and (m.path == VDSO or (bool(m.path) and not m.path.startswith("[")))


def _vdso_image(proc: str = "/proc") -> bytes | None:
    """This process's vDSO image, or None where it has none or /proc/self/mem is shut."""
    try:
        with open(f"{proc}/self/maps") as f:
            found = next((m for m in parse_maps(f.read()) if m.path == VDSO), None)
        if found is None:
            return None
        with open(f"{proc}/self/mem", "rb") as mem:
            mem.seek(found.start)
            return mem.read(found.end - found.start)
    except (OSError, ValueError, OverflowError):
        return None


@dataclass(slots=True)
class _Ranges:
    """Disjoint address ranges of one process, each with the value that holds across it
    (a function's name, an unwind row's rule): a leaf address never seen before (the
    interpreter's loop moves every sample) is then one bisection, not a symbol search."""

    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    values: list[object] = field(default_factory=list)

    def get(self, addr: int) -> object:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.ends[i]:
            return self.values[i]
        return _MISSING

    def add(self, lo: int, hi: int, value: object) -> None:
        if len(self.starts) > _CACHE_MAX:
            self.clear()
        i = bisect.bisect_right(self.starts, lo)
        if (i > 0 and self.ends[i - 1] > lo) or (i < len(self.starts) and self.starts[i] < hi):
            return  # overlaps a range already there: keep that one
        self.starts.insert(i, lo)
        self.ends.insert(i, hi)
        self.values.insert(i, value)

    def clear(self) -> None:
        self.starts.clear()
        self.ends.clear()
        self.values.clear()


@dataclass(slots=True)
class _Process:
    maps: list[Mapping]
    loaded_at: float
    perf_map: SymbolTable | None = None
    perf_map_mtime: float = 0.0
    starts: list[int] = field(default_factory=list)
    # Return addresses repeat sample after sample: each is named and ruled once.
    frames: dict[int, Frame] = field(default_factory=dict)
    rules: dict[int, Rule | None] = field(default_factory=dict)
    frame_ranges: _Ranges = field(default_factory=_Ranges)
    rule_ranges: _Ranges = field(default_factory=_Ranges)
    # Per mapping (by start): the path to open and the file's identity, stat()ed once.
    files: dict[int, tuple[str, _FileKey] | None] = field(default_factory=dict)


class Symbolizer:
    """Names user and kernel addresses; call `refresh(pid)` while a process lives."""

    def __init__(
        self, proc: str = "/proc", perf_map_dir: str = "/tmp", debug_root: str = "/usr/lib/debug"
    ) -> None:
        self._proc = proc
        self._debug_root = debug_root
        self._perf_map_dir = perf_map_dir
        self._procs: dict[int, _Process] = {}
        self._elfs: dict[_FileKey, ElfSymbols | None] = {}
        self._kernel: SymbolTable | None = None
        self._eh: dict[_FileKey, EhFrame | None] = {}
        # Shared by every process mapping the same file: keyed by (file, file offset).
        # (Unwind rules need no such cache: each file's EhFrame keeps its parsed tables.)
        self._names: dict[tuple[_FileKey, int], str | None] = {}

    # -- processes ---------------------------------------------------------------------
    def refresh(self, pid: int) -> bool:
        """Re-read the pid's maps (and perf map); False if the process is gone."""
        maps = self._settled_maps(pid)
        if maps is None:
            return False
        entry = self._procs.get(pid)
        if entry is None:
            self._procs[pid] = entry = _Process(maps, time.monotonic())
        elif set(entry.maps) <= set(maps):  # only added (dlopen): cached addresses hold
            entry.maps, entry.loaded_at = maps, time.monotonic()
        else:
            entry.maps, entry.loaded_at = maps, time.monotonic()
            entry.frames.clear()
            entry.rules.clear()
            entry.frame_ranges.clear()
            entry.rule_ranges.clear()
            entry.files.clear()
        entry.starts = [m.start for m in maps]
        self._load_perf_map(pid, entry)
        return True

    def _settled_maps(self, pid: int) -> list[Mapping] | None:
        """The pid's executable mappings once its program is mapped (None: gone).

        A process seen right after exec() (``subprocess.Popen`` returns when the exec'd
        child closes its error pipe, which the kernel does before the ELF loader maps the
        new program) can show maps without its own executable yet. Cached then, a
        process that exits before the next refresh left every sample of its binary
        ``[unknown]``; so wait, briefly, until /proc/PID/exe's file is mapped.
        """
        try:
            exe = os.readlink(f"{self._proc}/{pid}/exe").removesuffix(" (deleted)")
        except OSError:
            exe = ""
        for _ in range(_SETTLE_TRIES):
            try:
                with open(f"{self._proc}/{pid}/maps") as f:
                    maps = parse_maps(f.read())
            except OSError:
                return None
            if not exe or any(m.path == exe for m in maps):
                return maps
            time.sleep(_SETTLE_SLEEP_S)
        return maps

    def forget(self, pid: int) -> None:
        """Drop a pid's cache once its samples are all symbolized."""
        self._procs.pop(pid, None)

    def _load_perf_map(self, pid: int, entry: _Process) -> None:
        path = f"{self._perf_map_dir}/perf-{pid}.map"
        try:
            mtime = os.stat(path).st_mtime
            if entry.perf_map is not None and mtime == entry.perf_map_mtime:
                return
            with open(path) as f:
                entry.perf_map, entry.perf_map_mtime = parse_perf_map(f.read()), mtime
        except OSError:
            pass

    def _mapping(self, pid: int, addr: int) -> Mapping | None:
        if not _USER_LOW <= addr < _USER_HIGH:
            return None  # a broken walk's value: no maps re-read can place it
        entry = self._procs.get(pid)
        if entry is None:
            if not self.refresh(pid):
                return None
            entry = self._procs[pid]
        m = _find(entry, addr)
        if m is None and time.monotonic() - entry.loaded_at > 0.2 and self.refresh(pid):
            m = _find(self._procs[pid], addr)  # a library dlopen()ed since
        return m

    def _elf(self, m: Mapping, open_path: str, key: _FileKey) -> ElfSymbols | None:
        if key not in self._elfs:
            try:
                if key == _VDSO_KEY:
                    image = self._image(key, open_path)
                    self._elfs[key] = parse_symbols(VDSO, image) if image else None
                else:
                    self._elfs[key] = self._with_debug(read_symbols(m.path, open_path))
            except (OSError, ElfError):
                self._elfs[key] = None
        return self._elfs[key]

    def _image(self, key: _FileKey, open_path: str) -> bytes | None:
        """The bytes of a mapped file, or of the vDSO."""
        if key == _VDSO_KEY:
            return _vdso_image(self._proc)
        with open(open_path, "rb") as f:
            return f.read()

    def _opened(self, pid: int, m: Mapping) -> tuple[str, _FileKey] | None:
        """The mapping's file (path to open, identity), stat()ed once per mapping."""
        entry = self._procs.get(pid)
        if entry is None:
            return self._open(pid, m)
        if m.start not in entry.files:
            entry.files[m.start] = self._open(pid, m)
        return entry.files[m.start]

    def _open(self, pid: int, m: Mapping) -> tuple[str, _FileKey] | None:
        if m.path == VDSO:
            return VDSO, _VDSO_KEY
        # Read through the process's root so container paths resolve from the host.
        open_path = f"{self._proc}/{pid}/root{m.path}"
        try:
            st = os.stat(open_path)
        except OSError:
            open_path = m.path
            try:
                st = os.stat(open_path)
            except OSError:
                return None
        return open_path, (st.st_dev, st.st_ino, st.st_mtime, m.path)

    def in_code(self, pid: int, addr: int) -> bool:
        """Whether a user address lies in one of pid's executable mappings."""
        return self._mapping(pid, addr) is not None

    def rules_of(self, pid: int) -> Callable[[int], Rule | None]:
        """``unwind_rule`` for one pid, as the unwinder calls it per frame: the pid's
        cache is looked up once per sample, not once per frame."""
        entry = self._procs.get(pid)
        if entry is None:
            return lambda addr: self.unwind_rule(pid, addr)
        rules, slow = entry.rules, self.unwind_rule

        def rule_at(addr: int) -> Rule | None:
            rule = rules.get(addr, _MISSING)
            return slow(pid, addr) if rule is _MISSING else rule  # type: ignore[return-value]

        return rule_at

    def unwind_rule(self, pid: int, addr: int) -> Rule | None:
        """The .eh_frame rule for a user address of pid (None: no file, no FDE)."""
        return self._through_cache(pid, addr, _RULES, self._unwind_rule, lambda _r: True)

    def _unwind_rule(self, pid: int, addr: int) -> Rule | None:
        m = self._mapping(pid, addr)
        if m is None or not _has_file(m):
            return None
        opened = self._opened(pid, m)
        if opened is None:
            return None
        open_path, key = opened
        if key not in self._eh:
            try:
                image = self._image(key, open_path)
                self._eh[key] = EhFrame(image) if image else None
            except (OSError, ValueError, IndexError):
                self._eh[key] = None
        eh, elf = self._eh[key], self._elf(m, open_path, key)
        rule = None
        if eh is not None and elf is not None:
            vaddr = elf.file_offset_to_vaddr(addr - m.start + m.offset)
            row = eh.row(vaddr) if vaddr is not None else None
            if row is not None and vaddr is not None:
                rule = row[2]
                self._add_range(pid, m, addr - vaddr, row[0], row[1], rule, rules=True)
        return rule

    def _add_range(
        self, pid: int, m: Mapping, bias: int, lo: int, hi: int, value: object, *, rules: bool
    ) -> None:
        """Remember [lo, hi) (link-time, moved by `bias`) of pid, within the mapping."""
        entry = self._procs.get(pid)
        lo, hi = max(lo + bias, m.start), min(hi + bias, m.end)
        if entry is not None and lo < hi:
            (entry.rule_ranges if rules else entry.frame_ranges).add(lo, hi, value)

    def _with_debug(self, elf: ElfSymbols) -> ElfSymbols:
        """Stripped binaries get the symbols of their installed debug file (-dbgsym)."""
        path = debug_file(elf, self._debug_root)
        if path is None:
            return elf
        try:
            return with_debug_symbols(elf, read_symbols(path))
        except (OSError, ElfError):
            return elf

    def user_frame(self, pid: int, addr: int) -> Frame:
        """One user-space address (already adjusted for return addresses) as a frame
        (an unmapped one is not cached: it may be mapped at the next refresh)."""
        return self._through_cache(pid, addr, _FRAMES, self._user_frame, lambda f: bool(f.file))

    def _through_cache(
        self,
        pid: int,
        addr: int,
        caches: Callable[[_Process], tuple[dict[int, Any], _Ranges]],
        compute: Callable[[int, int], _V],
        keep: Callable[[_V], bool],
    ) -> _V:
        """`addr`'s value from pid's `caches` (exact, then ranges), else computed and
        cached when `keep` says so (computing may load the process: looked up again)."""
        entry = self._procs.get(pid)
        if entry is not None:
            hit = _cached(*caches(entry), addr)
            if hit is not _MISSING:
                return hit
        value = compute(pid, addr)
        entry = self._procs.get(pid)
        if entry is not None and keep(value):
            _keep(caches(entry)[0], addr, value)
        return value

    def _user_frame(self, pid: int, addr: int) -> Frame:
        m = self._mapping(pid, addr)
        if m is None or not _has_file(m):
            entry = self._procs.get(pid)
            name = entry.perf_map.lookup(addr) if entry and entry.perf_map else None
            if name:
                return Frame(name, FrameKind.NATIVE, f"{self._perf_map_dir}/perf-{pid}.map")
            return Frame(UNKNOWN, FrameKind.NATIVE, m.path if m else "")
        opened = self._opened(pid, m)
        if opened is None:
            return Frame(UNKNOWN, FrameKind.NATIVE, m.path)
        open_path, key = opened
        at = (key, addr - m.start + m.offset)
        elf = self._elf(m, open_path, key)
        vaddr = elf.file_offset_to_vaddr(at[1]) if elf is not None else None
        found = elf.symbol(vaddr) if elf is not None and vaddr is not None else None
        if at not in self._names:
            if len(self._names) > _CACHE_MAX:
                self._names.clear()
            self._names[at] = demangle(found[2]) if found else None
        frame = Frame(self._names[at] or UNKNOWN, FrameKind.NATIVE, m.path)
        if found is not None and vaddr is not None:
            self._add_range(pid, m, addr - vaddr, found[0], found[1], frame, rules=False)
        return frame

    def user_stack(self, pid: int, leaf_first: Sequence[int], callers: bool = False) -> list[Frame]:
        """A kernel-walked user stack (leaf first) as frames, root first.

        Every address but the leaf is a return address, looked up one byte earlier (in
        the call); with `callers` the stack has no leaf, so every address is one."""
        frames = [
            self.user_frame(pid, addr if i == 0 and not callers else addr - 1)
            for i, addr in enumerate(leaf_first)
        ]
        frames.reverse()
        return frames

    # -- kernel ------------------------------------------------------------------------
    def kernel_stack(self, leaf_first: Sequence[int]) -> list[Frame]:
        """A kernel stack (leaf first) as frames, root first."""
        if self._kernel is None:
            try:
                with open(f"{self._proc}/kallsyms") as f:
                    self._kernel = parse_kallsyms(f.read())
            except OSError:
                self._kernel = SymbolTable()
        frames = [
            Frame(self._kernel.lookup(a if i == 0 else a - 1) or UNKNOWN, FrameKind.KERNEL)
            for i, a in enumerate(leaf_first)
        ]
        frames.reverse()
        return frames


def _find(entry: _Process, addr: int) -> Mapping | None:
    i = bisect.bisect_right(entry.starts, addr) - 1
    if i >= 0 and addr < entry.maps[i].end:
        return entry.maps[i]
    return None


_RULES = attrgetter("rules", "rule_ranges")
_FRAMES = attrgetter("frames", "frame_ranges")


def _cached(exact: dict[int, Any], ranges: _Ranges, addr: int) -> Any:
    """`addr`'s value in a per-pid cache: the exact entry, else its range's (then kept as
    exact); _MISSING when neither knows it (None is a known value: no rule)."""
    hit = exact.get(addr, _MISSING)
    if hit is _MISSING:
        hit = ranges.get(addr)
        if hit is not _MISSING:
            exact[addr] = hit
    return hit


def _keep(exact: dict[int, Any], addr: int, value: Any) -> None:
    """Cache `value` for `addr`, starting over past _CACHE_MAX entries."""
    if len(exact) > _CACHE_MAX:
        exact.clear()
    exact[addr] = value
