"""Rooting a cut stack through the same Python stack of its thread.

Where the native unwind stops early (a C frame deeper than the stack copy), a sample
keeps its Python frames but not the native frames above them: without help its
`<module>` starts a second tree beside the thread's real one (`_start -> ... ->
PyEval_EvalCode -> <module>`), and a flame graph shows the program twice. The native
frames above a thread's outermost Python frame are how that thread entered the
interpreter: the same for every sample whose outermost Python frame is the same function
(the main thread's `<module>`; `Thread._bootstrap` of every `threading` thread). So they
are learned, per process and function, from samples unwound to their root, and put back
above the cut samples with that outermost frame; the cut itself stays marked
(`merge.NOT_UNWOUND`) where it is. A function entered by two different native paths (a C
library calling a Python callback from two places) is left cut: there is no telling
which path a cut sample came through.
"""

from __future__ import annotations

from kubeprof.agent.cpu.merge import NOT_UNWOUND
from kubeprof.model import FrameKind, Stack

_MAX = 1 << 14  # (process, function) entries remembered (dropped whole past this)
_AMBIGUOUS: Stack = ()

RootKey = tuple[int, str, str]  # pid, outermost Python function's name and file


class RootMemo:
    """Per process and outermost Python function: the native frames above it."""

    def __init__(self) -> None:
        self._roots: dict[RootKey, Stack] = {}

    def learn(self, pid: int, stack: Stack) -> None:
        """Remember the root of a stack unwound to the thread's first frame."""
        i = _first_python(stack)
        if i is None or i == 0 or NOT_UNWOUND in stack[:i]:
            return
        key = (pid, stack[i].name, stack[i].file)
        root = stack[:i]
        known = self._roots.get(key)
        if known is None:
            if len(self._roots) >= _MAX:
                self._roots.clear()
            self._roots[key] = root
        elif known and known != root:
            # A sample caught as the interpreter enters a call has its Python frames one
            # eval frame deeper (cpython_code.groups): a longer root that starts with the
            # true one. Keep the shorter; roots that part ways are two native paths.
            if root[: len(known)] == known:
                return
            self._roots[key] = root if known[: len(root)] == root else _AMBIGUOUS

    def rooted(self, pid: int, stack: Stack) -> Stack | None:
        """The cut stack (starting with its outermost Python frame) under the root the
        process entered that function through, or None where that is not known."""
        if not stack or stack[0].kind is not FrameKind.PYTHON:
            return None
        root = self._roots.get((pid, stack[0].name, stack[0].file))
        if not root:
            return None
        return (*root, *stack)

    def forget(self, pid: int) -> None:
        """Drop a process's roots (it exec()ed: its functions are other code now)."""
        for key in [k for k in self._roots if k[0] == pid]:
            del self._roots[key]


def _first_python(stack: Stack) -> int | None:
    return next((i for i, f in enumerate(stack) if f.kind is FrameKind.PYTHON), None)
