"""The session phase machine, as a pure function of what was observed.

    Pending --(target pods found)--> Running --(end time)--> Aggregating --> Completed
       |                                                          |
       +--(end time, no pod ever matched)--> Failed(NoMatchingPods)
                                                                  +--(bad data)--> Failed(...)

A session whose selector matches nothing stays Pending (its status says so, and it keeps
looking: pods may still appear) until its end time, then ends Failed with reason
NoMatchingPods, so `kubectl get profilingsessions` shows that nothing was profiled. Pods
that vanish while Running do not end the session early: a restarted pod comes back with
a new UID and is profiled again. Everything the machine reads is in `.status`, so an
operator restarted at any point continues from the same place.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubeprof.protocol.phases import ACCEPTS_DATA, TERMINAL, Phase

__all__ = ["ACCEPTS_DATA", "TERMINAL", "Observed", "Phase", "Step", "condition", "next_step"]


@dataclass(frozen=True, slots=True)
class Observed:
    """What one reconcile pass saw (times are Unix seconds)."""

    now: float
    end_time: float  # planned end of profiling (start + duration)
    drain_until: float  # when Aggregating may aggregate (0 while not Aggregating)
    pods: int  # target pods matched right now
    ever_matched: bool  # some pod matched at some point of the session
    aggregated: bool = False  # the aggregation of this session has been stored


@dataclass(frozen=True, slots=True)
class Step:
    """The phase to be in, and why (reason is CamelCase, message is for humans)."""

    phase: Phase
    reason: str
    message: str


def next_step(phase: Phase | None, o: Observed) -> Step:
    """The phase after `phase` given `o`; terminal phases never change."""
    if phase in TERMINAL:
        assert phase is not None
        return Step(phase, "", "")
    if phase is None or phase is Phase.PENDING:
        if o.now >= o.end_time:
            if o.ever_matched:
                return Step(Phase.AGGREGATING, "EndTimeReached", "collecting late batches")
            return Step(
                Phase.FAILED,
                "NoMatchingPods",
                "no pod matched the selector during the whole session",
            )
        if o.pods > 0:
            return Step(Phase.RUNNING, "TargetsFound", f"profiling {o.pods} pod(s)")
        return Step(
            Phase.PENDING, "NoMatchingPods", "no pod matches the selector yet; still looking"
        )
    if phase is Phase.RUNNING:
        if o.now >= o.end_time:
            return Step(Phase.AGGREGATING, "EndTimeReached", "collecting late batches")
        if o.pods == 0:
            return Step(
                Phase.RUNNING,
                "TargetsGone",
                "all target pods are gone; waiting for them to come back",
            )
        return Step(Phase.RUNNING, "Profiling", f"profiling {o.pods} pod(s)")
    # Aggregating
    if o.aggregated:
        return Step(Phase.COMPLETED, "Aggregated", "results stored")
    if o.now >= o.drain_until:
        return Step(Phase.AGGREGATING, "ReadyToAggregate", "aggregating results")
    return Step(Phase.AGGREGATING, "Draining", "collecting late batches")


def condition(
    ctype: str,
    ok: bool,
    reason: str,
    message: str,
    now_iso: str,
    previous: list[dict] | None = None,
) -> dict:
    """A status condition; lastTransitionTime moves only when the status flips."""
    status = "True" if ok else "False"
    for c in previous or []:
        if c.get("type") == ctype and c.get("status") == status:
            return {**c, "reason": reason, "message": message}
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now_iso,
    }
