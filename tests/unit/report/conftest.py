"""Fixtures for the renderer tests; the profile itself is described in sample_profile.py."""

from __future__ import annotations

import pytest

from kubeprof.reportdata import Profile

from .sample_profile import make_profile


@pytest.fixture
def profile() -> Profile:
    return make_profile()
