"""ProfilingPolicy decisions: stays-above, flapping, per-pod rate limit, cap, retention."""

import itertools

import pytest

from kubeprof.operator.policy import (
    MadeSession,
    PolicyError,
    decide,
    parse_policy,
    pod_label_value,
    session_body,
)

P = parse_policy(
    {
        "podSelector": {"matchLabels": {"app": "t"}},
        "idleAbove": 0.5,
        "for": "60s",
        "profileFor": "30s",
        "perPodPeriod": "10m",
        "maxConcurrentSessions": 2,
        "keepFinishedSessions": 1,
    }
)


def run(signal: list[dict[str, float]], step: float = 10.0) -> list[tuple[float, str]]:
    """Feed one figure per tick; sessions made are remembered like the cluster would."""
    state: dict[str, float] = {}
    made: list[MadeSession] = []
    fired = []
    for i, idle in enumerate(signal):
        now = 1000.0 + i * step
        d = decide(P, now, idle, state, made)
        state = d.above_since
        for pod in d.profile:
            made.append(MadeSession(f"s{len(made)}", pod, now, finished=False))
            fired.append((now, pod))
        made = [MadeSession(s.name, s.pod, s.created, now - s.created > 30) for s in made]
    return fired


def test_fires_after_staying_above_for_t_and_not_for_busy_pod() -> None:
    fired = run([{"idle": 0.9, "busy": 0.1}] * 8)
    assert fired == [(1060.0, "idle")]  # 0 s .. 60 s above, then once


def test_flapping_signal_never_fires() -> None:
    flap = [{"p": 0.9 if i % 5 else 0.2} for i in range(60)]  # dips below every 50 s
    assert run(flap) == []


def test_rate_limit_holds_one_per_pod_per_period() -> None:
    fired = run([{"p": 0.95}] * 200)  # 2000 s of steady idle, period 600 s
    times = [t for t, _ in fired]
    assert len(fired) == 4
    assert all(b - a >= 600 for a, b in itertools.pairwise(times))


def test_concurrency_cap_and_reason() -> None:
    made = [MadeSession("a", "x", 0, False), MadeSession("b", "y", 0, False)]
    d = decide(P, 5000, {"z": 0.9}, {"z": 0}, made)
    assert d.profile == [] and d.held == {"z": "concurrency-cap"}


def test_rate_limited_pod_is_reported_held() -> None:
    d = decide(P, 1000, {"x": 0.9}, {"x": 0}, [MadeSession("a", "x", 900, True)])
    assert d.profile == [] and d.held == {"x": "rate-limited"}


def test_missing_figure_restarts_the_clock() -> None:
    d = decide(P, 1000, {}, {"x": 0}, [])
    assert d.above_since == {}


def test_retention_deletes_oldest_finished_beyond_keep_once_past_period() -> None:
    made = [
        MadeSession("old", "x", 1, True),
        MadeSession("new", "z", 2, True),
        MadeSession("run", "y", 3, False),
    ]
    assert decide(P, 10, {}, {}, made).delete == []  # both still carry their rate limit
    assert decide(P, 1000, {}, {}, made).delete == ["old"]


def test_retention_never_lifts_the_rate_limit() -> None:
    keep0 = parse_policy(
        {
            "podSelector": {"matchLabels": {"a": "b"}},
            "for": "0s",
            "perPodPeriod": "10m",
            "keepFinishedSessions": 0,
        }
    )
    made = [MadeSession("s", "x", 1000, True)]
    d = decide(keep0, 1100, {"x": 0.9}, {"x": 0}, made)
    assert d.delete == [] and d.profile == [] and d.held == {"x": "rate-limited"}


@pytest.mark.parametrize(
    "spec,field",
    [
        ({"podSelector": {"matchLabels": {}}}, "spec.podSelector.matchLabels"),
        ({"podSelector": {"matchLabels": {"a": "b"}}, "idleAbove": 1.5}, "spec.idleAbove"),
        ({"podSelector": {"matchLabels": {"a": "b"}}, "for": "ten"}, "spec.for"),
    ],
)
def test_bad_spec_names_field(spec, field) -> None:
    with pytest.raises(PolicyError, match=field.replace(".", r"\.")):
        parse_policy(spec)


def test_session_is_owned_labelled_and_targets_the_pods_labels() -> None:
    pol = {"metadata": {"name": "idle-gpus", "namespace": "ml", "uid": "u-1"}}
    pod = {"metadata": {"name": "trainer-0", "labels": {"app": "t", "idx": "0"}}}
    s = session_body(pol, P, pod, 1234.0)
    assert s["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert s["metadata"]["labels"] == {
        "kubeprof.dev/policy": "idle-gpus",
        "kubeprof.dev/policy-pod": "trainer-0",
    }
    assert s["spec"] == {
        "target": {"namespace": "ml", "podSelector": {"matchLabels": {"app": "t", "idx": "0"}}},
        "duration": "30s",
    }
    assert len(s["metadata"]["name"]) <= 63
    assert len(pod_label_value("p" * 100)) <= 63
