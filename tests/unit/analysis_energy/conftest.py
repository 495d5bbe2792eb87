"""Helpers for the energy, batch-scaling and compare tests: the synthetic session builder."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
