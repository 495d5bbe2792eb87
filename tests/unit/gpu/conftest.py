"""Helpers for the GPU unit tests: the fixture reader and the fake cupti on sys.path; the
``fake`` (cupti) and ``wire`` (receiver + sender on a socket) fixtures."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parents[1] / "fixtures" / "gpu"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(FIXTURES))


@pytest.fixture
def fake(monkeypatch):
    from fake_cupti import FakeCupti

    from kubeprof.agent.gpu import tracer as tracer_mod

    fk = FakeCupti()
    pkg = types.ModuleType("cupti")
    pkg.cupti = fk.module()
    monkeypatch.setitem(sys.modules, "cupti", pkg)
    monkeypatch.setitem(sys.modules, "cupti.cupti", pkg.cupti)
    monkeypatch.setattr(tracer_mod, "preflight", lambda: None)
    monkeypatch.setattr(tracer_mod, "_version_check", lambda c: {"libcupti": ""})
    # the Python launch callback; test_launchhook.py drives the C one through a fake libcupti
    monkeypatch.setattr(tracer_mod, "load_hook", lambda mode: None)
    monkeypatch.setattr(os, "register_at_fork", lambda **kw: None)
    return fk


@pytest.fixture
def wire(tmp_path):
    from kubeprof.agent.gpu.receiver import GpuReceiver
    from kubeprof.agent.gpu.wire import Sender

    path = str(tmp_path / "gpu.sock")
    rx = GpuReceiver(path)
    rx.start()
    tx = Sender(path, interval_s=0.02)
    yield rx, tx
    tx.close(1.0)
    rx.stop(1.0)
