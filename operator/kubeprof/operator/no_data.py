"""Why a session's agents delivered nothing, from its agent pods as they are at the end.

A session that stored no record must not end saying "results stored": its status says that
no data arrived and the most telling reason the pods show, in this order: no pod was made
(admission refused them: the DaemonSet's FailedCreate event, see agent_failures), a pod
was never scheduled, a container never started (image pull, config), a container crashed,
or the agents ran and still sent nothing. Pure: the reconciler passes the pods it listed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubeprof.operator.agent_failures import AgentFailure


def _name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name", "?"))


def _condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return {}


def ready(pod: Mapping[str, Any]) -> bool:
    """The pod's Ready condition is True (what `.status.agents.ready` counts)."""
    return _condition(pod, "Ready").get("status") == "True"


def _unscheduled(pod: Mapping[str, Any]) -> str:
    c = _condition(pod, "PodScheduled")
    if c.get("status") == "False":
        return f"{c.get('reason') or 'Unschedulable'}: {c.get('message') or 'not scheduled'}"
    return "" if (pod.get("spec") or {}).get("nodeName") else "not scheduled"


def _container_trouble(pod: Mapping[str, Any]) -> tuple[str, str]:
    """("NotStarted"|"Crashed", what the container status says) or ("", "")."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        state, last = cs.get("state") or {}, cs.get("lastState") or {}
        ended = state.get("terminated") or last.get("terminated")
        if ended and (ended.get("exitCode") or 0) != 0:
            msg = (ended.get("message") or "").strip()[:300]
            return "Crashed", (
                f"container {cs.get('name')} exited {ended.get('exitCode')} "
                f"({ended.get('reason') or 'Error'}){': ' + msg if msg else ''}, restarted "
                f"{cs.get('restartCount', 0)} time(s)"
            )
        waiting = state.get("waiting")
        starting = (None, "ContainerCreating", "PodInitializing")
        if waiting and waiting.get("reason") not in starting:
            said = waiting.get("message") or ""
            return "NotStarted", (
                f"container {cs.get('name')} waiting: {waiting.get('reason')}"
                f"{': ' + said[:300] if said else ''}"
            )
    return "", ""


def explain(
    pods: Sequence[Mapping[str, Any]],
    failure: AgentFailure | None,
    nodes: int,
    namespace: str,
    session: str,
) -> tuple[str, str]:
    """(reason, message) for a session that ended with no data from `pods` (its agents)."""
    logs = f"kubectl logs -n {namespace} -l kubeprof.dev/session={session} --previous"
    if not pods:
        if failure is not None:
            return f"NoData{failure.reason}", f"no data arrived: {failure.message}"
        return "NoDataAgentsNotCreated", (
            f"no data arrived: no agent pod was created for the {nodes} node(s) of the "
            "targets (see kubectl get events -n "
            f"{namespace})"
        )
    for pod in pods:
        why = _unscheduled(pod)
        if why:
            return "NoDataAgentsNotScheduled", (
                f"no data arrived: agent pod {_name(pod)} was never scheduled ({why})"
            )
    for pod in pods:
        kind, what = _container_trouble(pod)
        if kind == "Crashed":
            return "NoDataAgentsCrashed", (
                f"no data arrived: agent pod {_name(pod)}: {what}; see {logs}"
            )
        if kind:
            return "NoDataAgentsNotStarted", (f"no data arrived: agent pod {_name(pod)}: {what}")
    up = sum(1 for p in pods if ready(p))
    if not up:
        return "NoDataAgentsNotReady", (
            f"no data arrived: none of the {len(pods)} agent pod(s) became ready"
        )
    return "NoDataAgentsSentNothing", (
        f"no data arrived: {up} of {len(pods)} agent pod(s) were ready but sent nothing (no "
        "process of the target pods found on their nodes, or the ingest API unreachable "
        f"from them); see {logs.removesuffix(' --previous')}"
    )
