"""Helpers for the analysis tests: the synthetic trace builder and the fixture reader."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parents[1] / "fixtures" / "gpu"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(FIXTURES))
