"""ProfilingPolicy: "when a pod's GPU idle stays above X for T, profile it for D" (pure part).

The decision is a pure function of the policy, the clock, the light agents' idle figures and
the sessions the policy already made, so flapping signals, the per-pod rate limit and the
concurrency cap are unit-tested without a cluster. The rate limit and the cap are derived
from the ProfilingSessions that exist (labelled with the policy and the pod), not from
memory, so an operator restart does not reset them; only "above since" lives in the
policy's status.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeprof.operator import owners
from kubeprof.operator.config import GROUP, KIND, VERSION
from kubeprof.operator.spec import parse_duration

POLICY_PLURAL = "profilingpolicies"
POLICY_LABEL = "kubeprof.dev/policy"  # on sessions a policy made: its name
POD_LABEL = "kubeprof.dev/policy-pod"  # the pod (name, or a hash when longer than 63)
POD_ANNOTATION = "kubeprof.dev/policy-pod"  # the full pod name


class PolicyError(ValueError):
    """A policy field is unusable; the message names the field and the fix."""


@dataclass(frozen=True, slots=True)
class Policy:
    """The parsed spec of one ProfilingPolicy."""

    match_labels: Mapping[str, str]
    idle_above: float  # 0-1
    for_s: float  # how long the idle must stay above idle_above
    profile_for: str  # the session's duration, as written
    period_s: float  # at most one session per pod per period
    max_concurrent: int  # sessions of this policy not finished, at most
    keep_finished: int  # finished sessions kept; older ones deleted once past period_s
    profilers: Mapping[str, Any] = field(default_factory=dict)


def parse_policy(spec: Mapping[str, Any]) -> Policy:
    """Policy from `spec`, or PolicyError naming the field."""
    sel = (spec.get("podSelector") or {}).get("matchLabels") or {}
    if not sel:
        raise PolicyError(
            "spec.podSelector.matchLabels must not be empty (it would select "
            "every pod of the namespace)"
        )
    idle = float(spec.get("idleAbove", 0.5))
    if not 0.0 <= idle < 1.0:
        raise PolicyError(f"spec.idleAbove {idle}: give a ratio in [0, 1), e.g. 0.5")
    durations = {}
    for key, default in (("for", "10m"), ("profileFor", "60s"), ("perPodPeriod", "1h")):
        try:
            durations[key] = parse_duration(str(spec.get(key, default)))
        except ValueError as exc:
            raise PolicyError(f"spec.{key}: {exc}") from exc
    return Policy(
        match_labels=dict(sel),
        idle_above=idle,
        for_s=durations["for"],
        profile_for=str(spec.get("profileFor", "60s")),
        period_s=durations["perPodPeriod"],
        max_concurrent=int(spec.get("maxConcurrentSessions", 2)),
        keep_finished=int(spec.get("keepFinishedSessions", 10)),
        profilers=dict(spec.get("profilers") or {}),
    )


@dataclass(frozen=True, slots=True)
class MadeSession:
    """A session this policy made, as far as the decision needs it."""

    name: str
    pod: str
    created: float  # Unix seconds
    finished: bool


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do this tick."""

    above_since: dict[str, float]  # the new state: pod -> when its idle went above
    profile: list[str]  # pods to create a session for now
    held: dict[str, str]  # pods past T that were not profiled, and why
    delete: list[str]  # finished sessions beyond keep_finished, oldest first


def decide(
    policy: Policy,
    now: float,
    idle: Mapping[str, float],
    above_since: Mapping[str, float],
    sessions: list[MadeSession],
) -> Decision:
    """The pods to profile now.

    `idle` holds the pods with a current figure; a pod without one, or at or below the
    threshold, restarts its clock (the idle must *stay* above for `for_s`).
    """
    state = {pod: above_since.get(pod, now) for pod, v in idle.items() if v > policy.idle_above}
    last: dict[str, float] = {}
    for s in sessions:
        last[s.pod] = max(last.get(s.pod, 0.0), s.created)
    running = sum(1 for s in sessions if not s.finished)
    profile: list[str] = []
    held: dict[str, str] = {}
    for pod in sorted(state, key=lambda p: (state[p], p)):  # longest idle first
        if now - state[pod] < policy.for_s:
            continue
        if pod in last and now - last[pod] < policy.period_s:
            held[pod] = "rate-limited"
            continue
        if running + len(profile) >= policy.max_concurrent:
            held[pod] = "concurrency-cap"
            continue
        profile.append(pod)
        state[pod] = now  # another full T of idle before this pod is considered again
    # A session inside its pod's period carries the rate limit: never delete it early.
    finished = sorted((s for s in sessions if s.finished), key=lambda s: (s.created, s.name))
    extra = len(finished) - policy.keep_finished
    delete = [s.name for s in finished[: max(extra, 0)] if now - s.created >= policy.period_s]
    return Decision(state, profile, held, delete)


def pod_label_value(pod: str) -> str:
    """A label value standing for `pod` (names over 63 characters are hashed)."""
    return pod if len(pod) <= 63 else "h-" + hashlib.sha256(pod.encode()).hexdigest()[:40]


def session_body(
    policy_obj: Mapping[str, Any], policy: Policy, pod: Mapping[str, Any], now: float
) -> dict[str, Any]:
    """An ordinary ProfilingSession for `pod`, owned by the policy.

    The target is the pod's own labels in its namespace: Kubernetes has no pod-name
    selector, so pods with exactly the same labels are profiled with it.
    """
    meta = policy_obj["metadata"]
    pod_name = str(pod["metadata"]["name"])
    digest = hashlib.sha256(f"{meta['uid']}/{pod_name}/{int(now)}".encode()).hexdigest()[:8]
    base = f"{meta['name']}-{pod_name}"[:50].rstrip("-.")
    labels = dict(list((pod["metadata"].get("labels") or {}).items())[:32])
    spec: dict[str, Any] = {
        "target": {"namespace": meta["namespace"], "podSelector": {"matchLabels": labels}},
        "duration": policy.profile_for,
    }
    if policy.profilers:
        spec["profilers"] = dict(policy.profilers)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": f"{base}-{digest}",
            "namespace": meta["namespace"],
            "labels": {POLICY_LABEL: meta["name"], POD_LABEL: pod_label_value(pod_name)},
            "annotations": {POD_ANNOTATION: pod_name},
            "ownerReferences": [owners.reference("ProfilingPolicy", meta, block_deletion=False)],
        },
        "spec": spec,
    }
