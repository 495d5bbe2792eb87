"""Where CPython keeps a thread's frames: struct offsets per minor version (3.10-3.13).

The BPF program walks `_PyRuntime.interpreters.head -> threads.head -> next...` to the
thread state whose thread id is the sampled thread's, then that thread's frame chain.
The offsets below were read with gdb (`ptype /o`, `&((T*)0)->field`) from the debug info
of pyenv's 3.10.13, 3.11.7, 3.12.1 and 3.13.0 builds on this machine; they are the
published layouts of `Include/internal/pycore_frame.h`, `pycore_pystate.h`,
`cpython/code.h` and `pycore_runtime.h` of those releases (layouts are stable within a
minor version, and the integration tests check them against the running interpreters).
For 3.13, which publishes `_Py_DebugOffsets` at the start of `_PyRuntime`, the offsets
are read from the process itself when its cookie is there, and the table is the
fallback.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, replace

# The 3.11 `_PyInterpreterFrame.owner` values; 3.12+ add CSTACK (the entry shim frame).
OWNED_BY_GENERATOR = 1
OWNED_BY_CSTACK = 3


@dataclass(frozen=True, slots=True)
class Layout:
    """Offsets the BPF walker and the code-object reader need for one CPython version."""

    version: tuple[int, int]
    runtime_interpreters_head: int
    interp_threads_head: int
    tstate_next: int
    tstate_thread_id: int  # native_thread_id (OS tid) from 3.11; pthread_t in 3.10
    tid_is_native: bool
    tstate_frame: int  # tstate->cframe (3.11/3.12), ->current_frame (3.13), ->frame (3.10)
    cframe_current_frame: int  # -1: tstate_frame points at the frame itself
    cframe_previous: int  # _PyCFrame.previous (3.11/3.12), -1 elsewhere
    frame_code: int
    frame_previous: int
    frame_instr: int  # prev_instr (3.11/3.12), instr_ptr (3.13), f_lasti (3.10, an int)
    frame_flags: int  # is_entry,owner bytes (3.11); owner (3.12+); -1 for 3.10
    code_filename: int
    code_name: int  # co_qualname where it exists, else co_name
    code_linetable: int
    code_firstlineno: int
    code_adaptive: int  # co_code_adaptive (the bytecode inline); -1 in 3.10
    code_firsttraceable: int  # _co_firsttraceable; -1 in 3.10
    unicode_ascii_size: int  # sizeof(PyASCIIObject): where compact ASCII data starts
    unicode_compact_size: int  # sizeof(PyCompactUnicodeObject)

    @property
    def label(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"


# One row per field, one column per version, so a field's move between releases reads
# across one line; each column checked against that version's headers.
_OFFSETS = """
field                       3.10  3.11  3.12  3.13
runtime_interpreters_head     32    40    40   632
interp_threads_head            8    16    72  7344
tstate_next                    8     8     8     8
tstate_thread_id             176   160   144   160
tstate_frame                  24    56    56    72
cframe_current_frame          -1     8     0    -1
cframe_previous               -1    16     8    -1
frame_code                    32    32     0     0
frame_previous                24    48     8     8
frame_instr                   96    56    56    56
frame_flags                   -1    68    70    70
code_filename                104   112   112   112
code_name                    112   128   128   128
code_linetable               120   136   136   136
code_firstlineno              40    72    68    68
code_adaptive                 -1   184   192   200
code_firsttraceable           -1   168   176   184
unicode_ascii_size            48    48    40    40
unicode_compact_size          72    72    56    56
"""


def _layouts(table: str) -> dict[tuple[int, int], Layout]:
    """The table's columns as Layouts, keyed by (3, minor)."""
    head, *rows = (line.split() for line in table.strip().splitlines())
    out: dict[tuple[int, int], Layout] = {}
    for i, label in enumerate(head[1:], start=1):
        major, minor = (int(n) for n in label.split("."))
        offsets = {row[0]: int(row[i]) for row in rows}
        # native_thread_id (the OS tid) exists from 3.11 on
        native = (major, minor) >= (3, 11)
        out[major, minor] = Layout(version=(major, minor), tid_is_native=native, **offsets)
    return out


LAYOUTS: dict[tuple[int, int], Layout] = _layouts(_OFFSETS)

_VERSION = re.compile(r"(?:^|/)(?:lib)?python(3)\.(\d+)[a-z]*(?:$|\.so)")


def version_of(path: str) -> tuple[int, int] | None:
    """(3, minor) from an interpreter or libpython path, e.g. /usr/lib/libpython3.11.so.1.0."""
    m = _VERSION.search(path)
    return (int(m.group(1)), int(m.group(2))) if m else None


def layout_for(version: tuple[int, int]) -> Layout | None:
    """The table's layout for a version, or None where kubeprof has none."""
    return LAYOUTS.get(version)


# _Py_DebugOffsets (3.13): cookie "xdebugpy", version, free_threaded, then u64 fields in
# the order of Include/internal/pycore_runtime.h.
_DEBUG_COOKIE = b"xdebugpy"
_DBG_FIELDS = {  # u64 word index in the struct (3.13.0's layout, checked with gdb)
    "runtime_interpreters_head": 5,  # runtime_state.interpreters_head
    "interp_threads_head": 9,  # interpreter_state.threads_head
    "tstate_next": 21,  # thread_state.next
    "tstate_frame": 23,  # thread_state.current_frame
    "tstate_thread_id": 25,  # thread_state.native_thread_id
    "frame_previous": 29,  # interpreter_frame.previous
    "frame_code": 30,  # interpreter_frame.executable
    "frame_instr": 31,  # interpreter_frame.instr_ptr
    "frame_flags": 33,  # interpreter_frame.owner
    "code_filename": 35,
    "code_name": 37,  # code_object.qualname
    "code_linetable": 38,
    "code_firstlineno": 39,
    "code_adaptive": 43,  # code_object.co_code_adaptive
}


def from_debug_offsets(blob: bytes, fallback: Layout) -> Layout | None:
    """A 3.13 layout from the `_Py_DebugOffsets` bytes at the start of `_PyRuntime`.

    None when the cookie is missing (not 3.13+, or memory not readable): use the table.
    Fields the struct does not publish (_co_firsttraceable, unicode sizes) come from the
    fallback.
    """
    if len(blob) < 8 * 48 or blob[:8] != _DEBUG_COOKIE:
        return None
    words = struct.unpack_from("<48Q", blob, 0)
    fields = {k: int(words[i]) for k, i in _DBG_FIELDS.items()}
    return replace(fallback, **fields)  # type: ignore[arg-type]
