"""C++ kernel names, demangled in batches (raw names are kept alongside).

cupti-python has no demangler, so this uses ``cxxfilt`` when importable and otherwise one
``c++filt`` process per batch (a process per name would cost ms each on a trace with
thousands of distinct kernels). Names that are not mangled, or when no demangler exists,
come back unchanged.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterable
from functools import lru_cache


def demangle_many(names: Iterable[str]) -> dict[str, str]:
    """Map each raw name to its demangled form (or itself)."""
    todo = [n for n in dict.fromkeys(names) if n.startswith("_Z")]
    out = {n: n for n in todo}
    if not todo:
        return out
    try:
        import cxxfilt

        for n in todo:
            with contextlib.suppress(Exception):
                out[n] = cxxfilt.demangle(n)
        return out
    except ImportError:
        pass
    tool = _cxxfilt_path()
    if not tool:
        return out
    try:
        proc = subprocess.run(
            [tool],
            input="\n".join(todo) + "\n",
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return out
    lines = proc.stdout.splitlines()
    if len(lines) == len(todo):
        out.update(zip(todo, lines, strict=True))
    return out


@lru_cache(maxsize=1)
def _cxxfilt_path() -> str:
    return shutil.which("c++filt") or ""
