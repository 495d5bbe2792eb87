"""`.status.gpuTracers` and the KernelTracing condition from the tracers' answers (pure)."""

from __future__ import annotations

from kubeprof.model import GpuTracerState
from kubeprof.operator.tracer_status import MAX_PODS, condition_parts, summarize


def st(pod: str, sock: str, state: str, reason: str = "") -> GpuTracerState:
    return GpuTracerState(pod, 1, sock, state, reason)


def test_all_refused_is_false_with_the_first_reason() -> None:
    why = "no GPU: no /dev/nvidia<N> device in this process's view"
    s = summarize([st("u1", "a", "refused", why), st("u1", "b", "refused", why)], {"u1": "ns/p"})
    assert s == {
        "traced": 0,
        "refused": 2,
        "pods": [{"pod": "ns/p", "traced": 0, "refused": 2, "reasons": [why]}],
    }
    assert condition_parts(s) == (
        False,
        "TracersRefused",
        f"2 process(es) refused, e.g. ns/p: {why}",
    )


def test_traced_pods_only() -> None:
    s = summarize([st("u1", "a", "on"), st("u2", "b", "off")], {"u1": "ns/a"})
    assert [p["pod"] for p in s["pods"]] == ["ns/a", "u2"]  # an unnamed pod shows its uid
    assert condition_parts(s) == (True, "Traced", "2 process(es) in 2 pod(s) traced")


def test_status_stays_bounded() -> None:
    many = [
        st(f"u{i:03}", "a", "refused", f"reason {j} " + "x" * 400)
        for i in range(MAX_PODS + 5)
        for j in range(5)
    ]
    s = summarize(many, {})
    assert len(s["pods"]) == MAX_PODS and s["podsNotListed"] == 5 and s["refused"] == 125
    assert all(len(p["reasons"]) == 3 and max(map(len, p["reasons"])) == 300 for p in s["pods"])
