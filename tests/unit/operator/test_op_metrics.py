"""/metrics stays bounded however many sessions, pods and GPUs users create."""

import pytest

from kubeprof.operator import metrics
from kubeprof.operator.metrics import Bounded


def _series(name: str) -> list[str]:
    return [line for line in metrics.render().decode().splitlines() if line.startswith(name + "{")]


def _dropped(metric: str) -> float:
    return (
        metrics.REGISTRY.get_sample_value(
            "kubeprof_metrics_series_dropped_total", {"metric": metric}
        )
        or 0.0
    )


@pytest.fixture
def small_caps(monkeypatch):
    monkeypatch.setattr(metrics, "MAX_SESSIONS", 3)
    monkeypatch.setattr(metrics, "MAX_SERIES_PER_SESSION", 4)
    gauge = metrics.Gauge(
        "kubeprof_test_bounded", "test", ["namespace", "session", "pod"], registry=metrics.REGISTRY
    )
    yield Bounded(gauge, "kubeprof_test_bounded")
    metrics.REGISTRY.unregister(gauge)


def test_series_per_session_are_capped_and_counted(small_caps):
    before = _dropped("kubeprof_test_bounded")
    results = [small_caps.put(("ns", "s", f"pod-{i}"), 0.5) for i in range(10)]
    assert results == [True] * 4 + [False] * 6
    assert len(_series("kubeprof_test_bounded")) == 4
    assert small_caps.put(("ns", "s", "pod-0"), 0.9)  # an existing series still updates
    assert _dropped("kubeprof_test_bounded") - before == 6


def test_least_recently_updated_session_is_evicted_whole(small_caps):
    before = _dropped("kubeprof_test_bounded")
    for s in ("a", "b", "c"):
        small_caps.put(("ns", s, "p1"), 1)
        small_caps.put(("ns", s, "p2"), 1)
    small_caps.put(("ns", "a", "p1"), 0.5)  # "a" is fresh again; "b" is now the oldest
    small_caps.put(("ns", "d", "p1"), 1)
    sessions = {
        line.split('session="')[1].split('"')[0] for line in _series("kubeprof_test_bounded")
    }
    assert sessions == {"a", "c", "d"}
    assert _dropped("kubeprof_test_bounded") - before == 2  # b's two series


def test_deleting_a_session_removes_its_series(small_caps):
    small_caps.put(("ns", "x", "p1"), 1)
    small_caps.put(("ns", "y", "p1"), 1)
    small_caps.forget("ns", "x")
    assert [line.split('session="')[1][0] for line in _series("kubeprof_test_bounded")] == ["y"]
    assert small_caps.series("ns", "x") == set()


def test_forget_session_clears_both_real_gauges():
    metrics.BOUNDED_GPU_IDLE.put(("ns", "gone", "ns", "n1", "0", "p"), 0.3)
    metrics.BOUNDED_FINDINGS.put(("ns", "gone", "gpu_starved", "high"), 1)
    metrics.forget_session("ns", "gone")
    text = metrics.render().decode()
    assert 'session="gone"' not in text


def test_a_session_that_ends_stops_its_live_idle_series_and_keeps_its_results():
    metrics.BOUNDED_GPU_IDLE.put(("ns", "ended", "ns", "n1", "0", "p"), 0.9)
    metrics.BOUNDED_GPU_IDLE.put(("ns", "other", "ns", "n1", "1", "q"), 0.9)
    metrics.BOUNDED_POD_GPU_IDLE.put(("ns", "ended", "ns", "p", "nvml"), 0.9)
    metrics.BOUNDED_FINDINGS.put(("ns", "ended", "gpu_idle", "warning"), 1)
    metrics.end_session("ns", "ended")
    assert [
        line.split('session="')[1].split('"')[0] for line in _series("kubeprof_gpu_idle_ratio")
    ] == ["other"]
    assert len(_series("kubeprof_pod_gpu_idle_ratio")) == 1
    assert len(_series("kubeprof_findings")) == 1
    metrics.forget_session("ns", "ended")
    metrics.forget_session("ns", "other")
