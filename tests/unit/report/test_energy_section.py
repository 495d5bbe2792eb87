"""`kubeprof report` shows the session's energy and CO2e (same estimate as `compare`)."""

from __future__ import annotations

import json
from pathlib import Path

from kubeprof import reporting
from kubeprof.model import Batch, GpuMetricSample
from kubeprof.report.formats import render
from kubeprof.storage import Store

SWEEP = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "sweep"


def _store(tmp_path, meta: dict[str, str], metrics) -> str:
    url = f"sqlite:///{tmp_path}/e.db"
    store = Store.open(url)
    try:
        t0 = metrics[0].ts_ns if metrics else 0
        sid = store.create_session("e", start_ns=t0, meta=meta)
        store.write_batch(sid, Batch(gpu_metrics=tuple(metrics)))
        store.finish_session(sid, end_ns=t0 + 11_000_000_000)
    finally:
        store.close()
    return url


def test_h200_session_energy_in_text_and_json(tmp_path):
    s = next(
        x
        for x in json.loads((SWEEP / "batch_sweep.json").read_text())
        if x["run"]["name"] == "bs64"
    )
    metrics = [
        GpuMetricSample(int(ts), int(dev), m, float(v))
        for rows in s["energy_metrics"].values()
        for ts, dev, m, v in rows
    ]
    meta = {k: v for k, v in s["meta"].items() if k.startswith(("carbon:", "host:"))}
    report = reporting.load(_store(tmp_path, meta, metrics), "e")
    assert report.energy is not None and report.energy.gpus
    assert abs(report.energy.gpus[0].joules - 1755.3) < 0.1  # compare.txt: 1755.3 J measured
    text = render(report, "text")
    assert "Energy and CO2e (Cloud Carbon Footprint method)" in text
    assert "g CO2e" in text and "NVML energy counter" in text
    doc = json.loads(render(report, "json"))
    assert doc["energy"]["co2e_g"] > 0 and doc["energy"]["pue"] == 1.135


def test_unknown_region_says_so_instead_of_a_figure(tmp_path):
    meta = {"carbon:cloudProvider": "aws", "carbon:region": "mars-1"}
    report = reporting.load(_store(tmp_path, meta, []), "e")
    assert report.energy is None and "carbon.region" in report.energy_note
    assert "energy not estimated" in render(report, "text")
