"""Fold CPython's own native frames out of stacks that have Python frames.

A CPU sample of a Python program carries, between its Python frames, the interpreter's
machinery (`_PyEval_EvalFrameDefault`, `_PyFunction_Vectorcall`, `PyObject_Call`, ...)
and below the innermost Python frame the interpreter's helpers (`_PyLong_Add`,
`PyObject_Free`). For a Python user those are noise that takes the self time away from
their functions; reports fold them (`kubeprof report --keep-interpreter` keeps them).
Native frames of anything else (C extensions, libc, libcrypto, CUDA) stay where they
are, under the Python frame that called them. Stacks without a Python frame are kept
whole: there the interpreter is all there is to see.
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace

from kubeprof.model import Frame, FrameKind, Stack, WeightedStack

_INTERPRETER = re.compile(r"^(python[\d.]*[dmu]*|libpython[\d.]+[dmu]*\.so.*)$")


@functools.lru_cache(maxsize=4096)
def is_interpreter_path(path: str) -> bool:
    """Whether an ELF path is CPython itself (the python binary or libpython); cached: a
    profile has a few dozen ELF paths over hundreds of thousands of frames."""
    return bool(_INTERPRETER.match(path.rsplit("/", 1)[-1]))


def is_interpreter_frame(frame: Frame) -> bool:
    """A native frame of CPython's own code."""
    return frame.kind is FrameKind.NATIVE and is_interpreter_path(frame.file)


def fold_stack(stack: Stack) -> Stack:
    """The stack without interpreter frames, if it has a Python frame; else unchanged."""
    if not any(f.kind is FrameKind.PYTHON for f in stack):
        return stack
    kept = tuple(f for f in stack if not is_interpreter_frame(f))
    return stack if len(kept) == len(stack) else kept


def fold_stacks(stacks: tuple[WeightedStack, ...]) -> tuple[WeightedStack, ...]:
    """Fold each stack; stacks of one thread that become equal are merged, first-seen order."""
    merged: dict[tuple[object, ...], WeightedStack] = {}
    folds: dict[int, Stack] = {}  # by the stack tuple's identity: threads share stack tuples
    # one tuple per folded value (two stacks may fold to equal ones): keys compare it by
    # identity, never hashing its frames again
    canonical: dict[Stack, Stack] = {}
    for ws in stacks:
        folded = folds.get(id(ws.stack))
        if folded is None:
            one = fold_stack(ws.stack)
            folded = folds[id(ws.stack)] = canonical.setdefault(one, one)
        key = (id(folded), ws.pid, ws.tid, ws.thread, ws.process)
        prev = merged.get(key)
        if prev is None:
            merged[key] = ws if folded is ws.stack else replace(ws, stack=folded)
        else:
            merged[key] = replace(
                prev, samples=prev.samples + ws.samples, value_ns=prev.value_ns + ws.value_ns
            )
    return tuple(merged.values())
