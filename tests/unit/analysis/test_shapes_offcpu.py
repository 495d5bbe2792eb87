"""Verdicts on the H200 shapes recorded WITH off-CPU samples: the wait is named, not guessed.

``tests/fixtures/gpu/truth/offcpu`` holds the five shapes of ``examples/gpu_shapes.py``
recorded again once the py-spy fallback sampled waiting threads (``sampled-wall`` off-CPU
samples, the syscall as the reason). Replayed through the real analysis, the finding must
name where the launching thread waited (the workload's own waiting function, with the
blocking call), never "off CPU, no stack", and the verdicts must agree with the workload's
own measurement as they do on the on-CPU-only recordings (test_shapes_vs_truth.py).
"""

from __future__ import annotations

import pytest
import trace_io

from conftest import FIXTURES
from kubeprof.analysis import cpu_samples as cs
from kubeprof.analysis.findings import Analysis, Kind, Severity, Window, analyse

OFFCPU = FIXTURES / "truth" / "offcpu"
LOUD = (Severity.WARNING, Severity.CRITICAL)
_CACHE: dict[str, tuple[dict, Analysis, int]] = {}


def run(mode: str) -> tuple[dict, Analysis, int]:
    """(truth line, analysis with the off-CPU samples, number of off-CPU samples)."""
    if mode not in _CACHE:
        tr = trace_io.load_trace(OFFCPU / f"{mode}.jsonl.gz")
        sm = tr.meta.get("session_meta") or {}
        hz = float(sm.get("cpu_hz", 99) or 99)
        cpu = cs.from_samples(tr.samples, hz=hz, source=sm.get("cpu_source", ""))
        window = Window(tr.meta["session_start_ns"], tr.meta["session_end_ns"])
        r = analyse(tr.activities, tr.metrics, cpu, window, offcpu=tr.offcpu)
        _CACHE[mode] = (tr.meta["truth"], r, len(tr.offcpu))
    return _CACHE[mode]


def _names(message: str, function: str) -> bool:
    return f"`{function} (" in message


def test_recordings_hold_off_cpu_samples():
    for mode in ("serve", "loader_starved"):
        _, _, n = run(mode)
        assert n > 1000, (mode, n)


def test_serve_names_the_request_wait_from_its_off_cpu_stack():
    truth, r, _ = run("serve")
    top = r.findings[0]
    assert top.kind is Kind.WAITING_FOR_WORK and top.severity is Severity.CRITICAL
    assert _names(top.message, truth["host_functions"]["waiting"])
    assert "off CPU, no stack" not in top.message
    assert "futex" in top.message  # queue.get blocks on a futex
    # the launching thread's off-CPU share of the idle vs the workload's own waiting share
    waiting = truth["host_share"]["waiting_ms"]
    assert top.evidence.numbers["waiting_share"] == pytest.approx(waiting, abs=0.08)
    assert abs(r.headline.ratio - truth["idle_ratio"]) < 0.05


def test_starved_loader_names_next_batch_and_the_workers_function():
    truth, r, _ = run("loader_starved")
    top = r.findings[0]
    assert top.kind is Kind.INPUT_STARVED and top.severity is Severity.CRITICAL
    fns = truth["host_functions"]
    assert _names(top.message, fns["waiting"]) and _names(top.message, fns["worker"])
    assert "off CPU, no stack" not in top.message
    assert abs(r.headline.ratio - truth["idle_ratio"]) < 0.08
    found = {f.kind for f in r.findings}
    assert not found & {Kind.GPU_STARVED, Kind.WAITING_FOR_WORK, Kind.COPY_BOUND}


def test_copy_only_is_copy_bound():
    truth, r, _ = run("copyonly")
    assert r.findings[0].kind is Kind.COPY_BOUND
    assert abs(r.headline.ratio - truth["idle_ratio"]) < 0.06
    found = {f.kind for f in r.findings}
    assert not found & {Kind.LAUNCH_BOUND, Kind.FUSION, Kind.SYNC_STALL, Kind.GPU_STARVED}


def test_pageable_loader_names_both_causes_and_no_critical():
    truth, r, _ = run("loader_pageable")
    found = {f.kind: f for f in r.findings}
    assert Kind.INPUT_STARVED in found and Kind.COPY_BOUND in found
    assert all(f.severity is not Severity.CRITICAL for f in r.findings)
    assert abs(r.headline.ratio - truth["idle_ratio"]) < 0.06


def test_healthy_loader_raises_nothing_loud():
    truth, r, _ = run("loader_ok")
    assert not [f for f in r.findings if f.severity in LOUD], r.findings
    assert abs(r.headline.ratio - truth["idle_ratio"]) < 0.05
