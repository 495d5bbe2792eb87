"""The phase machine, as a table."""

import pytest

from kubeprof.operator.phases import Observed, Phase, condition, next_step

P, R, A, C, F = Phase.PENDING, Phase.RUNNING, Phase.AGGREGATING, Phase.COMPLETED, Phase.FAILED


def obs(now=10.0, end=100.0, drain=0.0, pods=1, ever=True, agg=False) -> Observed:
    return Observed(now, end, drain, pods, ever, agg)


@pytest.mark.parametrize(
    ("phase", "o", "want", "reason"),
    [
        (None, obs(), R, "TargetsFound"),
        (None, obs(pods=0, ever=False), P, "NoMatchingPods"),
        (P, obs(pods=0, ever=False, now=100), F, "NoMatchingPods"),
        (P, obs(pods=0, ever=True, now=100), A, "EndTimeReached"),
        (R, obs(), R, "Profiling"),
        (R, obs(pods=0), R, "TargetsGone"),
        (R, obs(now=100), A, "EndTimeReached"),
        (A, obs(now=100, drain=105), A, "Draining"),
        (A, obs(now=105, drain=105), A, "ReadyToAggregate"),
        (A, obs(now=105, drain=105, agg=True), C, "Aggregated"),
        (C, obs(now=1e9), C, ""),
        (F, obs(), F, ""),
    ],
)
def test_transitions(phase, o, want, reason):
    step = next_step(phase, o)
    assert (step.phase, step.reason) == (want, reason)


def test_condition_keeps_transition_time_while_status_holds():
    first = condition("Ready", True, "A", "m", "t1")
    again = condition("Ready", True, "B", "m2", "t2", [first])
    assert again["lastTransitionTime"] == "t1" and again["reason"] == "B"
    flipped = condition("Ready", False, "C", "m3", "t3", [again])
    assert flipped["lastTransitionTime"] == "t3" and flipped["status"] == "False"
