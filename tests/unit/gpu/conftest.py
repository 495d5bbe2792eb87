"""Helpers for the GPU unit tests: the fixture reader and the fake cupti on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parents[1] / "fixtures" / "gpu"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(FIXTURES))
