"""PyTorch autograd sequence numbers: what links a backward kernel to its forward op.

PyTorch's autograd engine launches backward kernels from its own native threads
(``pt_autograd_<device>``), where no Python frame exists. Each autograd node records the
sequence number of the forward op that created it: a per-thread counter
(``at::sequence_number``) that the op took just before launching its forward kernels. So:

- at a forward launch (a thread with Python frames) we read the counter's next value,
  ``at::sequence_number::peek()``; the op that created node ``N`` launches with ``peek() ==
  N + 1``;
- at a backward launch we read the node the engine is running on this thread,
  ``torch._C._current_autograd_node()._sequence_nr()``.

The receiver joins the two (``stack_join.StackJoin._backward_stack``): a backward kernel is
charged to the Python stack of the first forward launch with ``peek > N``, as ``backward of
Linear.forward (linear.py:134)``. Both reads are resolved lazily, once torch is imported,
and fail closed (-1): nothing here may raise into the workload.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from typing import Any

NONE = -1
# AccumulateGrad and other nodes made outside a forward op carry UINT64_MAX
_NO_FORWARD = 1 << 63
_PEEK_SYMBOL = "_ZN2at15sequence_number4peekEv"  # at::sequence_number::peek()


class AutogradSeq:
    """``forward()`` / ``backward()`` sequence numbers, or ``NONE`` when unavailable."""

    def __init__(self, modules: dict[str, Any] | None = None) -> None:
        self._modules = sys.modules if modules is None else modules
        self._peek: Callable[[], int] | None = None
        self._node: Callable[[], Any] | None = None
        self._resolved = False
        self.error = ""

    def _resolve(self) -> bool:
        """Bind both reads once ``torch._C`` is loaded; False until then (or on failure)."""
        c = self._modules.get("torch._C")
        if c is None:
            return False
        self._resolved = True
        try:
            self._node = c._current_autograd_node
            self._peek = _load_peek(self._modules.get("torch"))
        except Exception as exc:  # noqa: BLE001 - must never break the workload
            self._node = self._peek = None
            self.error = f"autograd sequence numbers unavailable: {exc!r}"
        return self._peek is not None

    def forward(self) -> int:
        """Next sequence number on this thread (the one its next autograd node will get)."""
        peek = self._peek
        if peek is None:
            if self._resolved or not self._resolve():
                return NONE
            peek = self._peek
            assert peek is not None
        try:
            return int(peek())
        except Exception:  # noqa: BLE001 - must never break the workload
            return NONE

    def peek_address(self) -> int:
        """Address of ``at::sequence_number::peek`` for the C launch hook to call directly:
        0 while torch is not imported yet, -1 when it cannot be had (``error`` says why)."""
        if self._peek is None and (self._resolved or not self._resolve()):
            return -1 if self._resolved else 0
        try:
            return int(ctypes.cast(self._peek, ctypes.c_void_p).value or -1)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - must never break the workload
            return -1

    def backward(self) -> int:
        """Sequence number of the autograd node running on this thread, if any."""
        # the lazy resolve is written out as in forward(): both run at every launch
        get = self._node
        if get is None:
            if self._resolved or not self._resolve():
                return NONE
            get = self._node
            assert get is not None
        try:
            node = get()
            if node is None:
                return NONE
            seq = int(node._sequence_nr())
        except Exception:  # noqa: BLE001 - must never break the workload
            return NONE
        return NONE if seq >= _NO_FORWARD else seq


def _load_peek(torch: Any) -> Callable[[], int]:
    """``at::sequence_number::peek`` from the already-loaded libtorch_cpu, GIL kept held."""
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    if not os.path.exists(path):
        path = _mapped("libtorch_cpu.so") or path
    # PyDLL: the call neither releases nor re-takes the GIL (it is a thread-local read);
    # RTLD_NOLOAD: only the copy torch already loaded, never a second one
    lib = ctypes.PyDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    fn = getattr(lib, _PEEK_SYMBOL)
    fn.restype = ctypes.c_uint64
    fn.argtypes = []
    return fn


def _mapped(name: str) -> str:
    """Path of a library mapped into this process, from /proc/self/maps ("" if none)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if line.rstrip().endswith(name) or f"/{name}" in line:
                    return line.split(None, 5)[-1].strip()
    except OSError:
        pass
    return ""
