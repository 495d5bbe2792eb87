"""Findings reach `.status` and `/metrics`; the rolling GPU idle gauge means "idle now"."""

from __future__ import annotations

import sys
from pathlib import Path

from kubeprof.analysis import gpu_idle, steady_idle
from kubeprof.analysis.phases import Window
from kubeprof.model import Batch, GpuActivity, GpuMetricSample
from kubeprof.operator import aggregate, metrics
from kubeprof.storage import Store

TRUTH = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "truth"
S = 1_000_000_000


def _trace(mode: str):
    sys.path.insert(0, str(TRUTH.parent))
    import trace_io

    return trace_io.load_trace(TRUTH / f"{mode}.jsonl.gz")


def _aggregate(tmp_path, batch: Batch):
    store = Store.open(f"sqlite:///{tmp_path}/f.db")
    try:
        sid = store.create_session("f")
        store.write_batch(sid, batch)
        with store.engine.begin() as conn:
            s = aggregate.aggregate(conn, sid)
            recent = aggregate.recent_gpu_idle(conn, sid, 60.0)
    finally:
        store.close()
    return s, recent


def test_starved_session_status_leads_with_the_starved_finding(tmp_path):
    t = _trace("starved")
    s, _ = _aggregate(
        tmp_path, Batch(gpu_activities=tuple(t.activities), gpu_metrics=tuple(t.metrics))
    )
    status = aggregate.status_summary(s, {})
    assert status["findings"] and len(status["findings"]) <= 3
    assert status["findings"][0]["kind"] == "gpu_starved"
    assert status["topFinding"] == s.findings[0][1].message[:120]
    assert "GPU" in status["topFinding"]
    metrics.publish_findings("ns", "starved", s)
    text = metrics.render().decode()
    assert 'kubeprof_findings{kind="gpu_starved",namespace="ns",session="starved"' in text
    metrics.forget_session("ns", "starved")
    assert 'session="starved"' not in metrics.render().decode()


def test_compute_bound_session_is_neither_starved_nor_launch_bound(tmp_path):
    t = _trace("compute")
    s, _ = _aggregate(
        tmp_path, Batch(gpu_activities=tuple(t.activities), gpu_metrics=tuple(t.metrics))
    )
    kinds = {f.kind.value for _, f in s.findings}
    assert not kinds & {"gpu_starved", "launch_bound", "sync_stall"}


def _kernels(start_s: float, end_s: float, busy_share: float, step_s: float = 0.1):
    out, t = [], start_s
    while t < end_s:
        out.append(
            GpuActivity("kernel", "k", int(t * S), int((t + step_s * busy_share) * S), 0, 7, 1)
        )
        t += step_s
    return out


def test_recent_figure_follows_the_last_window_not_the_session():
    # Busy the first 100 s, then mostly idle for the last 60 s: "idle now" is high.
    acts = _kernels(0, 100, 0.9) + _kernels(100, 160, 0.1)
    fig = gpu_idle.recent(acts, [], 60 * S, 160 * S)[0]
    assert fig.source == gpu_idle.CUPTI and abs(fig.ratio - 0.9) < 0.02
    whole = gpu_idle.by_device(acts, 0, 160 * S)[0].idle_ratio
    assert whole < 0.5  # the session-long figure would hide it


def test_recent_figure_falls_back_to_nvml_and_is_absent_without_data():
    util = [GpuMetricSample(int(t * S), 1, "gpu_util_pct", 25.0) for t in range(100, 161)]
    figs = gpu_idle.recent([], util, 60 * S, 160 * S)
    assert figs[1].source == gpu_idle.NVML and abs(figs[1].ratio - 0.75) < 1e-9
    assert gpu_idle.recent([], util, 60 * S, 400 * S) == {}  # nothing in the window


def test_running_gauge_drops_series_that_left_the_window():
    fig = steady_idle.of_ratio(0.8, gpu_idle.CUPTI, Window(0, 1))
    metrics.publish_recent_gpu_idle(
        "ns", "live", {"n1": {0: fig, 1: fig}}, {("n1", 0): ["u1"]}, {"u1": "ns/trainer-0"}
    )
    text = metrics.render().decode()
    assert (
        'gpu="0",namespace="ns",node="n1",pod="trainer-0",session="live",'
        'session_namespace="ns"} 0.8'
    ) in text
    assert (
        'gpu="1",namespace="ns",node="n1",pod="",session="live",session_namespace="ns"} 0.8' in text
    )
    metrics.publish_recent_gpu_idle(
        "ns", "live", {"n1": {0: fig}}, {("n1", 0): ["u1"]}, {"u1": "ns/trainer-0"}
    )
    text = metrics.render().decode()
    assert (
        'gpu="1",namespace="ns",node="n1",pod="",session="live",session_namespace="ns"' not in text
    )
    metrics.forget_session("ns", "live")


def test_recent_gpu_idle_reads_each_node_on_its_own_clock(tmp_path):
    acts = _kernels(0, 100, 0.9) + _kernels(100, 160, 0.1)
    _, recent = _aggregate(tmp_path, Batch(gpu_activities=tuple(acts)))
    assert abs(recent[""][0].ratio - 0.9) < 0.02
