"""Pure joins of native and Python frames into one stack.

`interleave` is the BPF path's: Python frames walked in the kernel go where the
interpreter ran them. The rest is the py-spy fallback's (`pyspy_collector`): the kernel
gives exact times, thread ids, kernel frames and the native frames near the leaf; py-spy
gives the Python frames. A BPF sample takes the Python stack its thread had
at that moment, and the Python frames replace the interpreter's own native frames: the
native part kept is what runs below the innermost interpreter frame (a C extension,
libc), so a stack reads Python callers -> interpreter -> native callee -> kernel.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from kubeprof.analysis.interpreter_frames import is_interpreter_path
from kubeprof.model import Frame, FrameKind, Stack

__all__ = [
    "NOT_UNWOUND",
    "interleave",
    "is_eval_frame",
    "is_interpreter",
    "is_interpreter_path",
    "merge_stack",
    "python_stack_at",
]


def python_stack_at(
    times_ns: Sequence[int], stacks: Sequence[Stack], ts_ns: int, period_ns: int
) -> Stack | None:
    """The Python stack at ts_ns given a thread's change points, or None before the first.

    py-spy reports a change at the first sample that saw it; the change itself happened
    within the sampling period before that, so the boundary is taken half a period
    earlier (the nearest-sample estimate).
    """
    i = bisect_right(times_ns, ts_ns + period_ns // 2) - 1
    return stacks[i] if i >= 0 else None


def is_interpreter(frame: Frame) -> bool:
    """Whether a native frame is CPython's own code."""
    return is_interpreter_path(frame.file)


def merge_stack(python: Stack | None, native: Sequence[Frame], kernel: Sequence[Frame]) -> Stack:
    """One root-first stack: Python frames, the native frames under them, kernel frames.

    Without Python frames the native stack is kept whole. With them, native frames from
    the root down to the innermost interpreter frame are dropped except that frame
    itself, which marks where Python called into native code; if the kernel's walk
    found no interpreter frame (no frame pointers), every native frame it found is kept
    under the Python frames, since all of them ran below the innermost Python call.
    When py-spy unwound native code itself (--native), its stack ends in native frames
    and only the kernel frames are added.
    """
    if not python:
        return (*native, *kernel)
    if python[-1].kind is FrameKind.NATIVE:  # py-spy --native already walked native code
        return (*python, *kernel)
    cut = 0
    for i, frame in enumerate(native):
        if is_interpreter(frame):
            cut = i
    return (*python, *native[cut:], *kernel)


_EVAL = "_PyEval_EvalFrameDefault"
# Stands for the native frames between a thread's first frame and the outermost one the
# unwinder reached, where it stopped early (a stack deeper than the copy, code without
# usable unwind tables): the stack is cut there, and says so.
NOT_UNWOUND = Frame("[native frames not unwound]", FrameKind.NATIVE)


def is_eval_frame(frame: Frame) -> bool:
    """CPython's bytecode loop (and its compiler-split `.cold` part)."""
    return frame.kind is FrameKind.NATIVE and frame.name.startswith(_EVAL)


def interleave(
    python_groups: Sequence[Sequence[Frame]],
    native: Sequence[Frame],
    kernel: Sequence[Frame],
    *,
    unwound: bool = True,
) -> Stack:
    """One root-first stack with Python frames where the interpreter ran them.

    `python_groups` comes innermost invocation first, each group root-first: what one
    `_PyEval_EvalFrameDefault` call on the C stack was running. Walking the native stack
    from the leaf, the n-th eval frame gets the n-th group as its callees (the eval
    frame stays, so reports can fold or keep the interpreter). Where the native unwind
    stopped before the thread's first frame (not `unwound`), NOT_UNWOUND marks the cut
    above the outermost native frame found, and the groups left over go above it, in
    order; eval frames left over keep no Python frames. Kernel frames go at the leaf end.
    """
    out: list[Frame] = []
    g, groups = 0, len(python_groups)
    for frame in reversed(native):  # leaf first
        if g < groups and is_eval_frame(frame):
            out.extend(reversed(python_groups[g]))
            g += 1
        out.append(frame)
    if native and not unwound:
        out.append(NOT_UNWOUND)
    for group in python_groups[g:]:
        out.extend(reversed(group))
    out.reverse()
    return (*out, *kernel)
