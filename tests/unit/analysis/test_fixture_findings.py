"""The findings layer on the recorded H200 traces (tests/fixtures/gpu).

Reference idle figures are the ones the fixture README records for each run (JAX: steady
state from the 10th-percentile training-loop kernel; torch: active window of the full run,
which includes warm-up, so it bounds the steady figure from above)."""

from __future__ import annotations

import pytest
import trace_io

from conftest import FIXTURES
from kubeprof.analysis.findings import Kind, Window, analyse

REFERENCE = {"jax_fast": 0.088, "jax_slow": 0.647, "torch_slow": 0.729}


@pytest.fixture(scope="module", params=["torch_fast", "torch_slow", "jax_fast", "jax_slow"])
def result(request):
    meta, acts, metrics = trace_io.load(FIXTURES / f"{request.param}.jsonl.gz")
    window = Window(meta["session_start_ns"], meta["session_end_ns"])
    return request.param, analyse(acts, metrics, None, window)


def test_headline_matches_the_recorded_reference(result):
    name, r = result
    h = r.headline
    assert h.ratio is not None and h.kernel_busy is not None and h.copy_busy is not None
    # the references count kernels only; the headline counts copies busy too (never more idle)
    kernel_idle = 1 - h.kernel_busy
    assert h.ratio <= kernel_idle + 1e-9
    assert h.busy_ns <= h.kernel_busy_ns + h.copy_busy_ns
    if name in REFERENCE:
        assert abs(kernel_idle - REFERENCE[name]) < 0.05, h
    else:  # torch_fast: 14 % over an active window that includes warm-up
        assert kernel_idle < 0.14
    assert r.phases.steps >= 20
    assert r.figures.startup.ratio is not None and r.figures.startup.ratio > 0.95


def test_starved_fires_on_slow_input_only(result):
    name, r = result
    found = {f.kind for f in r.findings}
    assert (Kind.GPU_STARVED in found) == name.endswith("_slow")
    assert Kind.LAUNCH_BOUND not in found  # big kernels: neither run is launch-bound
    assert Kind.PAGEABLE_MEMCPY not in found  # the names carry no pageable/pinned suffix


def test_breakdown_puts_slow_input_on_the_host(result):
    name, r = result
    assert r.breakdown is not None
    shares = r.breakdown.shares()
    assert abs(sum(shares.values()) - 1) < 1e-9
    if name.endswith("_slow"):
        assert shares["host"] > 0.8


def test_memory_vs_compute_uses_gpm_where_recorded(result):
    name, r = result
    kb = next(f for f in r.findings if f.kind is Kind.KERNEL_BOUND)
    if name.startswith("torch"):  # the torch runs sampled GPM; the JAX runs no metrics
        assert "by GPM counters" in kb.message and "gpm_dram_bw_pct" in kb.evidence.numbers
    else:
        assert "name heuristic" in kb.message
