"""The C launch hook loads and keys call sites on every CPython the tracer bundle serves.

The agent image builds ``_launchhook`` once, against CPython's stable ABI
(docker/agent.Dockerfile), so injected pods of any supported Python get the C hot path, not
the slower Python callback. That one build (scripts/build_launchhook.sh with this
machine's Debian python3 headers) is imported by each interpreter of 3.10-3.13 found here
(pyenv's), which gets one id per whole stack: the same caller always the same id, a
different caller line a new one, one walk each; from 3.11 on, also with the keys read from
the interpreter frames in place (frame_keys), which the hook uses only after checking them.
Skipped for a version with no interpreter
here, or without a C compiler and headers to build it.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kubeprof.agent.gpu import bundle, frame_keys

ROOT = Path(__file__).resolve().parents[3]

CHECK = (ROOT / "tests" / "gpu" / "hook_versions_check.py").read_text()


def interpreter(version: tuple[int, int]) -> str | None:
    """A CPython of ``version`` with its headers: pyenv's builds, else one on PATH."""
    pyenv = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    found = sorted(glob.glob(f"{pyenv}/versions/{version[0]}.{version[1]}.*/bin/python3"))
    return found[-1] if found else shutil.which(f"python{version[0]}.{version[1]}")


@pytest.fixture(scope="module")
def abi3_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one stable-ABI build, made with the Python running these tests (>= 3.11)."""
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("hook")
    built = subprocess.run(
        [str(ROOT / "scripts/build_launchhook.sh"), sys.executable, str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    if not (out / "_launchhook.abi3.so").is_file():
        pytest.skip(f"not built: {built.stderr.strip()}")
    assert "warning" not in built.stderr  # an implicit declaration here is a crash there
    return out


@pytest.mark.parametrize("version", bundle.VERSIONS, ids=lambda v: bundle.tag(v))
def test_one_stable_abi_build_keys_whole_stacks_on_each_bundled_python(
    version: tuple[int, int], abi3_build: Path
) -> None:
    py = interpreter(version)
    if py is None:
        pytest.skip(f"no Python {version[0]}.{version[1]} on this machine")
    offsets = frame_keys.offsets(version)
    args = [py, "-c", CHECK, str(abi3_build)] + ([json.dumps(offsets)] if offsets else [])
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "[1] [2] ['layer', 'layer'] 2", out
    if version >= (3, 11):
        assert out[1:] == ["raw True [1] [2] [3] ['leaf', 'leaf', 'leaf'] 3"], out
    else:
        assert offsets is None and out[1:] == [], out
