"""GPU tests: skipped cleanly unless an NVIDIA GPU, torch with CUDA and cupti-python exist.

Run them on a GPU machine with ``pytest -m gpu tests/gpu``. ``KUBEPROF_GPU_FIXTURES_OUT=dir``
makes them also write the trace fixtures that tests/unit/gpu replays.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "gpu"))


def _gpu_reason() -> str:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver (libcuda.so.1)"
    if not glob.glob("/dev/nvidia[0-9]*"):
        return "no GPU device"
    for mod in ("torch", "cupti"):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} not importable"
    return ""


_REASON = _gpu_reason()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _REASON:
        return
    skip = pytest.mark.skip(reason=f"GPU tests need a GPU: {_REASON}")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
