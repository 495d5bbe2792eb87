"""Is a process CPython, which version, and where is its `_PyRuntime`?

Found from /proc/PID/maps: the mapped python binary or libpython names the version, and
its `_PyRuntime` symbol plus the mapping's load bias give the runtime's address in the
process. For 3.13+ the `_Py_DebugOffsets` at that address are preferred over the table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from kubeprof.agent import cpython_layout
from kubeprof.agent.cpu.elf import ElfError, ElfSymbols, find_symbol, read_symbols
from kubeprof.agent.cpu.symbolize import Mapping, parse_maps
from kubeprof.agent.cpython_layout import Layout


@dataclass(frozen=True, slots=True)
class CPython:
    """One CPython process as the BPF walker needs it."""

    pid: int
    path: str  # the ELF holding _PyRuntime (python binary or libpython)
    runtime_addr: int
    code_type: int  # address of PyCode_Type (frames whose code is not one are torn)
    layout: Layout
    debug_offsets: bool  # layout read from the process's _Py_DebugOffsets (3.13+)


class NotSupported(Exception):
    """A CPython kubeprof has no layout for; the message says which and what works."""


def _candidates(maps: list[Mapping]) -> list[Mapping]:
    seen: dict[str, Mapping] = {}
    for m in maps:
        if cpython_layout.version_of(m.path) and m.path not in seen:
            seen[m.path] = m
    # libpython first: a python binary linked against it has no _PyRuntime of its own
    return sorted(seen.values(), key=lambda m: "libpython" not in m.path)


_FILES: dict[tuple[int, int, float], tuple[int | None, int, ElfSymbols]] = {}


def _runtime_symbol(path: str, open_path: str) -> tuple[int | None, int, ElfSymbols]:
    """`_PyRuntime`'s and `PyCode_Type`'s link-time addresses and the ELF, once per file."""
    st = os.stat(open_path)
    key = (st.st_dev, st.st_ino, st.st_mtime)
    if key not in _FILES:
        _FILES[key] = (
            find_symbol(path, "_PyRuntime", open_path),
            find_symbol(path, "PyCode_Type", open_path) or 0,
            read_symbols(path, open_path),
        )
    return _FILES[key]


def _load_bias(pid: int, path: str, elf: ElfSymbols) -> int | None:
    """Process address minus link-time address for this ELF's executable mapping."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            text = f.read()
    except OSError:
        return None
    for m in parse_maps(text):
        if m.path == path:
            vaddr = elf.file_offset_to_vaddr(m.offset)
            if vaddr is not None:
                return m.start - vaddr if elf.is_dyn else 0
    return None


def inspect(pid: int) -> CPython | None:
    """The CPython in pid, None if it is not one; NotSupported for unknown versions."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = parse_maps(f.read())
    except OSError:
        return None
    for m in _candidates(maps):
        version = cpython_layout.version_of(m.path)
        assert version is not None
        open_path = f"/proc/{pid}/root{m.path}"
        if not os.path.exists(open_path):
            open_path = m.path
        try:
            value, code_type, elf = _runtime_symbol(m.path, open_path)
            if value is None:
                continue
            bias = _load_bias(pid, m.path, elf)
        except (OSError, ElfError):
            continue
        if bias is None:
            continue
        layout = cpython_layout.layout_for(version)
        if layout is None:
            raise NotSupported(
                f"CPython {version[0]}.{version[1]} in PID {pid} has no frame layout in "
                "kubeprof (3.10-3.13 do): its samples carry native frames only"
            )
        addr = value + bias
        from_process = None
        if version >= (3, 13):
            from_process = cpython_layout.from_debug_offsets(read_memory(pid, addr, 384), layout)
        code_type_addr = code_type + bias if code_type else 0
        layout = from_process or layout
        return CPython(pid, m.path, addr, code_type_addr, layout, from_process is not None)
    return None


def awaits_libpython(pid: int) -> bool:
    """Is pid a python binary whose libpython the dynamic loader has not mapped yet?

    Right after exec() (where ``subprocess.Popen`` returns) only the binary and ld.so are
    mapped; a binary linked against libpython holds no `_PyRuntime` of its own, so
    `inspect` finds nothing for the few ms until the loader maps the library.
    """
    try:
        with open(f"/proc/{pid}/maps") as f:
            found = _candidates(parse_maps(f.read()))
    except OSError:
        return False
    if not found or any("libpython" in m.path for m in found):
        return False
    for m in found:
        open_path = f"/proc/{pid}/root{m.path}"
        if not os.path.exists(open_path):
            open_path = m.path
        try:
            if _runtime_symbol(m.path, open_path)[0] is None:
                return True
        except (OSError, ElfError):
            continue
    return False


def read_memory(pid: int, addr: int, size: int) -> bytes:
    """Bytes of the process's memory ("" where unreadable)."""
    if not 0 < addr < 1 << 47:
        return b""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except OSError:
        return b""
    try:
        return os.pread(fd, size, addr)
    except OSError:
        return b""
    finally:
        os.close(fd)
