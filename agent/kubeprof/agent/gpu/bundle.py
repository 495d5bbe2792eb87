"""The tracer bundle the injection init container copies into a pod, and picking from it.

cupti-python (and its compiled dependencies, cuda-bindings and numpy) is built per CPython
minor version, and the init container runs the agent image's Python, not the pod's: it
cannot know which interpreter the workload uses. So the agent image carries one build per
supported version and the init container copies them all (docker/agent.Dockerfile)::

    <root>/lib/kubeprof/...          on PYTHONPATH (sitecustomize imports it at start)
    <root>/lib/kubeprof/agent/gpu/_launchhook.abi3.so
                                     the C launch hook: one build against CPython's stable
                                     ABI (3.10) that every version imports (per-version
                                     _launchhook.cpython-3XY-*.so builds count too)
    <root>/deps/{nvidia,cuda_pathfinder,elftools}/...   pure Python and libcupti: any version
    <root>/py/cp310/{cupti,cuda,numpy}/...              one folder per CPython minor
    <root>/py/cp311/...  <root>/py/cp312/...  <root>/py/cp313/...

At start the dormant tracer calls ``activate`` for ``sys.version_info``: it appends
``deps/`` and ``py/cp3XY/`` to the **end** of ``sys.path``, after the workload's own
site-packages, so the workload's numpy or nvidia packages always win over ours. A Python
with no build there gets the reason instead, and stays untraced.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV_BUNDLE = "KUBEPROF_GPU_BUNDLE"  # the bundle's root in the pod (the webhook sets it)
VERSIONS = ((3, 10), (3, 11), (3, 12), (3, 13))  # builds the agent image carries


def tag(version: tuple[int, int]) -> str:
    """``cp312`` for (3, 12): the wheel tag the folder is named after."""
    return f"cp{version[0]}{version[1]}"


def builds(root: Path) -> list[tuple[int, int]]:
    """The Python versions the bundle at ``root`` has a cupti-python build for."""
    return [v for v in VERSIONS if (root / "py" / tag(v) / "cupti").is_dir()]


def hooks(root: Path) -> list[tuple[int, int]]:
    """The Python versions the bundle at ``root`` has a built C launch hook for (without
    one, that Python's tracer falls back to its pure-Python callback, slower per launch)."""
    gpu = root / "lib" / "kubeprof" / "agent" / "gpu"
    if (gpu / "_launchhook.abi3.so").is_file():
        return list(VERSIONS)  # the stable-ABI build: every supported version imports it
    return [v for v in VERSIONS if any(gpu.glob(f"_launchhook.cpython-{v[0]}{v[1]}-*.so"))]


def pick(root: Path, version: tuple[int, int]) -> tuple[list[Path], str]:
    """(folders to append to sys.path, "") or ([], why this Python cannot be traced)."""
    have = builds(root)
    if version not in have:
        listed = ", ".join(f"{a}.{b}" for a, b in have) or "none"
        return [], (
            f"no cupti-python build for Python {version[0]}.{version[1]} in the "
            f"tracer bundle {root} (it has: {listed})"
        )
    return [p for p in (root / "deps", root / "py" / tag(version)) if p.is_dir()], ""


def activate(
    root: str | Path | None = None,
    version: tuple[int, int] | None = None,
    path: list[str] | None = None,
) -> str:
    """Make this interpreter's build importable (appended to ``path``, default sys.path);
    "" when done or when no bundle is configured, else the reason it cannot be traced."""
    given = root if root is not None else os.environ.get(ENV_BUNDLE, "")
    if not given:
        return ""  # kubeprof record, or cupti-python installed in the workload's own env
    v = version or (sys.version_info[0], sys.version_info[1])
    dirs, why = pick(Path(given), v)
    target = sys.path if path is None else path
    for d in dirs:
        if str(d) not in target:
            target.append(str(d))
    return why
