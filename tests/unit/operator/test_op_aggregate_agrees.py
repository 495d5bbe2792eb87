"""`.status` and `kubeprof report` give the same GPU idle figure on the same database."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kubeprof import reporting
from kubeprof.model import Batch, CpuSample, Frame, FrameKind, GpuMetricSample
from kubeprof.operator import aggregate
from kubeprof.report.formats import render
from kubeprof.storage import Store

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gpu"
STACK = (Frame("main", FrameKind.PYTHON, "t.py", 1),)


def _session(tmp_path, batch: Batch, start_ns: int = 0, end_ns: int = 0) -> tuple[str, int]:
    url = f"sqlite:///{tmp_path}/same.db"
    store = Store.open(url)
    try:
        sid = store.create_session("same", start_ns=start_ns)
        store.write_batch(sid, batch)
        store.finish_session(sid, end_ns=end_ns)
    finally:
        store.close()
    return url, sid


def _status(url: str, sid: int) -> dict:
    store = Store.open(url)
    try:
        with store.engine.begin() as conn:
            s = aggregate.aggregate(conn, sid)
            aggregate.store(conn, sid, s)
    finally:
        store.close()
    return aggregate.status_summary(s, {})


def test_cupti_trace_gives_one_figure(tmp_path):
    sys.path.insert(0, str(FIXTURES))
    import trace_io

    meta, acts, metrics = trace_io.load(FIXTURES / "torch_slow.jsonl.gz")
    assert any(m.metric == "gpu_util_pct" for m in metrics)  # NVML exists, CUPTI still wins
    url, sid = _session(
        tmp_path,
        Batch(gpu_activities=tuple(acts), gpu_metrics=tuple(metrics)),
        meta["session_start_ns"],
        meta["session_end_ns"],
    )
    report = reporting.load(url, "same")
    assert report.gpu is not None and report.gpu.headline is not None
    status = _status(url, sid)
    assert status["gpuIdleSource"] == "cupti" == report.gpu.headline.source
    assert status["gpuIdle"] == f"{report.gpu.headline.ratio:.0%}"
    text = render(report, "text")
    assert f"GPU idle {100 * report.gpu.headline.ratio:.1f} % of the steady state" in text


def test_nvml_only_is_the_labelled_fallback_in_both(tmp_path):
    util = tuple(GpuMetricSample(i, 0, "gpu_util_pct", v) for i, v in enumerate((20.0, 40.0)))
    samples = tuple(CpuSample(i, 7, 7, "py", 0, STACK) for i in range(3))
    url, sid = _session(tmp_path, Batch(samples=samples, gpu_metrics=util))
    report = reporting.load(url, None)
    assert report.gpu is not None and report.gpu.headline is not None
    assert (report.gpu.headline.source, report.gpu.headline.ratio) == ("nvml", pytest.approx(0.7))
    assert "GPU idle ratio (all GPUs): 70.0 % from NVML device utilisation" in render(
        report, "text"
    )
    status = _status(url, sid)
    assert (status["gpuIdle"], status["gpuIdleSource"]) == ("70%", "nvml")
    assert status["topFinding"].startswith("GPU idle 70% (NVML)")
