"""Integration tests run real eBPF on this machine; skip with the reason when they can't."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cpu"


def _bpf_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root for eBPF (run the bpf tests as root)"
    try:
        from kubeprof.agent.cpu import preflight
    except ImportError as e:  # pragma: no cover
        return f"kubeprof not importable: {e}"
    return preflight.check_environment()


@pytest.fixture(scope="session")
def bpf_ready() -> None:
    reason = _bpf_skip_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def hotloop(tmp_path_factory) -> Path:
    """The native fixture, built with frame pointers so the kernel can walk it."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed: apt-get install gcc")
    out = tmp_path_factory.mktemp("native") / "hotloop"
    subprocess.run(
        ["gcc", "-O0", "-fno-omit-frame-pointer", "-o", str(out), str(FIXTURES / "hotloop.c")],
        check=True,
    )
    return out


@pytest.fixture(scope="session")
def python_exe() -> str:
    """A CPython py-spy can read (the venv's interpreter is Debian's python3.11)."""
    import sys

    return sys.executable
