"""The C launch hook builds and keys call sites on every CPython the tracer bundle serves.

The agent image builds ``_launchhook`` once per CPython minor (docker/agent.Dockerfile) so
injected pods of any supported Python get the C hot path, not the slower Python callback.
Each interpreter of 3.10-3.13 found on this machine (pyenv's builds carry their headers)
builds it with scripts/build_launchhook.sh, imports it, and gets one id per whole stack:
the same caller always the same id, a different caller line a new one, one walk each.
Skipped for a version with no interpreter, headers or C compiler here.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kubeprof.agent.gpu import bundle

ROOT = Path(__file__).resolve().parents[3]

CHECK = """
import sys
sys.path.insert(0, sys.argv[1])
import _launchhook as hook

walked = []

def walk(frame):
    walked.append(frame.f_code.co_name)
    return len(walked)

def leaf():
    return hook.site_for(sys._getframe(1), walk)

def layer():
    return leaf()

def from_prefill():
    return layer()

def from_decode():
    return layer()

a = {from_prefill() for _ in range(5)}
b = {from_decode() for _ in range(5)}
print(sorted(a), sorted(b), walked, hook.stats()["walks"])
"""


def interpreter(version: tuple[int, int]) -> str | None:
    """A CPython of ``version`` with its headers: pyenv's builds, else one on PATH."""
    pyenv = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    found = sorted(glob.glob(f"{pyenv}/versions/{version[0]}.{version[1]}.*/bin/python3"))
    return found[-1] if found else shutil.which(f"python{version[0]}.{version[1]}")


@pytest.mark.parametrize("version", bundle.VERSIONS, ids=lambda v: bundle.tag(v))
def test_the_hook_builds_and_keys_whole_stacks_on_each_bundled_python(
    version: tuple[int, int], tmp_path: Path
) -> None:
    py = interpreter(version)
    if py is None:
        pytest.skip(f"no Python {version[0]}.{version[1]} on this machine")
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler")
    built = subprocess.run(
        [str(ROOT / "scripts/build_launchhook.sh"), py, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    if not list(tmp_path.glob("_launchhook*.so")):
        pytest.skip(f"not built for {py}: {built.stderr.strip()}")
    assert "warning" not in built.stderr  # an implicit declaration here is a crash there
    out = subprocess.run(
        [py, "-c", CHECK, str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[1] [2] ['layer', 'layer'] 2", out
