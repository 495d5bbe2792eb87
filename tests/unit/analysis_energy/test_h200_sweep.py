"""Batch-size guidance and energy on a real sweep recorded on the H200.

tests/fixtures/gpu/sweep/batch_sweep.json holds, per session of `examples/train_torch.py` at
batch 8..256, the run figures kubeprof measured from its kernels and GPM counters, and the
NVML energy readings (README beside it says how it was recorded). The verdicts and the energy
arithmetic are re-derived here from those measurements.
"""

from __future__ import annotations

import json
from pathlib import Path

from kubeprof.analysis import batch_scaling, energy
from kubeprof.model import GpuMetricSample

SWEEP = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "sweep"


def _sessions() -> list[dict]:
    return json.loads((SWEEP / "batch_sweep.json").read_text())


def test_sweep_turns_compute_bound_and_plateaus_at_batch_128():
    runs = [batch_scaling.Run(**s["run"]) for s in _sessions()]
    assert [r.batch_size for r in runs] == [8, 16, 32, 64, 128, 256]
    result = batch_scaling.analyse(runs)
    assert result.compute_bound_from == 128 and result.bound_basis.startswith("GPM")
    assert result.plateau_from == 128
    assert not result.missing


def test_sweep_energy_matches_the_compare_output():
    by_name = {s["run"]["name"]: s for s in _sessions()}
    s = by_name["bs64"]
    metrics = {
        node: [GpuMetricSample(int(ts), int(dev), metric, float(v)) for ts, dev, metric, v in rows]
        for node, rows in s["energy_metrics"].items()
    }
    coeffs = energy.coefficients(energy.settings_from_meta(s["meta"]))
    est = energy.estimate(
        metrics,
        wall_s=s["wall_s"],
        cpu_samples=s["cpu_samples"],
        hz=s["hz"],
        vcpus=int(s["meta"]["host:vcpus"]),
        memory_gb=float(s["meta"]["host:memory_gb"]),
        coeffs=coeffs,
    )
    assert est.gpus and est.gpus[0].method == energy.COUNTER
    assert f"{est.facility_kwh:.6f}" == "0.000774"  # compare.txt: "bs64: 0.000774 kWh"
    assert "bs64: 0.000774 kWh, 0.293 g CO2e" in (SWEEP / "compare.txt").read_text()
    assert abs(est.co2e_g - 0.293) < 0.001
