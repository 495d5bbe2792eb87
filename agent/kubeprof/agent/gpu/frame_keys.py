"""How the C launch hook reads a launch's call-site key: interpreter frames in place, or the
frame API.

The key is the chain of (code object, instruction) pairs of the launching thread. Through
the frame API (``PyFrame_GetBack``) every frame without a frame object gets one made, and a
decode step's module calls (``_wrapped_call_impl``, ``_call_impl``, ``forward``) are new at
nearly every launch: on CPython 3.12 the hook cost ~530-610 ns a launch at depth 20 that
way, ~225 ns reading the frames in place (bench/launchhook_cost.py, BENCHMARKS.md), and
batch-1 decode on an H100 lost 10.5 % of its tokens/s against 8.8 %. From 3.11 on, the
hook reads the thread's ``_PyInterpreterFrame`` chain with the offsets of
``kubeprof.agent.cpython_layout`` (the table the BPF unwinder uses, checked against each
interpreter by the integration tests), and only after the chain it reads equals the frame
objects' chain on the calling thread. 3.10's frames are objects already: nothing to gain.
"""

from __future__ import annotations

import sys
from typing import Any

from kubeprof.agent import cpython_layout

FRAME_MODES = ("auto", "api")


def offsets(version: tuple[int, int]) -> tuple[int, ...] | None:
    """The ``raw_frames`` offsets for a CPython version, or None where there are none."""
    layout = cpython_layout.layout_for(version)
    if layout is None or version < (3, 11):
        return None
    owner = layout.frame_flags if version >= (3, 12) else -1  # 3.11 has no shim frames
    return (
        layout.tstate_frame,
        layout.cframe_current_frame,
        layout.frame_code,
        layout.frame_previous,
        layout.frame_instr,
        owner,
        cpython_layout.OWNED_BY_CSTACK,
    )


def use(hook: Any, mode: str, version: tuple[int, int] | None = None) -> str:
    """Switch ``hook`` to in-place frames where ``mode`` allows and the check passes;
    "raw" or "api", the one it uses."""
    if mode not in FRAME_MODES:
        raise ValueError(f"unknown KUBEPROF_GPU_FRAMES {mode!r} (auto or api)")
    if not hasattr(hook, "raw_frames"):  # a hook built before it could read frames in place
        return "api"
    found = offsets(version or (sys.version_info[0], sys.version_info[1]))
    if mode == "api" or found is None:
        hook.raw_frames(None)
        return "api"
    return "raw" if hook.raw_frames(found) else "api"
