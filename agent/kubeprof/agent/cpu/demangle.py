"""C++ symbol names made readable, through libstdc++'s own `__cxa_demangle`.

The demangler the C++ runtime ships is the reference (it is what `c++filt` and gdb use);
where libstdc++ is missing the mangled name is kept, which is still a correct name. One
demangler for the agent: CPU frames name by name, GPU kernel names by the batch
(`demangle_many`), in process and without a `c++filt` child.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Iterable
from functools import cache, lru_cache
from typing import Any


@cache
def _runtime() -> tuple[Any, Any] | None:
    try:
        cxx = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    fn = cxx.__cxa_demangle
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    libc.free.argtypes = [ctypes.c_void_p]
    return fn, libc.free


@lru_cache(maxsize=1 << 16)
def demangle(name: str) -> str:
    """`_ZN2ns5Klass6methodEi` -> `ns::Klass::method(int)`; other names unchanged."""
    if not name.startswith("_Z"):
        return name
    rt = _runtime()
    if rt is None:
        return name
    fn, free = rt
    status = ctypes.c_int(0)
    out = fn(name.encode(), None, None, ctypes.byref(status))
    if not out or status.value != 0:
        return name
    try:
        return ctypes.string_at(out).decode(errors="replace")
    finally:
        free(out)


def demangle_many(names: Iterable[str]) -> dict[str, str]:
    """Each distinct mangled name (``_Z...``) of `names` -> its demangled form (or itself);
    names that are not mangled are left out."""
    return {n: demangle(n) for n in dict.fromkeys(names) if n.startswith("_Z")}
