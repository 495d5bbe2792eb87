"""Why a session's agent pods do not exist, from the DaemonSet controller's events.

When admission refuses a DaemonSet's pods (Pod Security, a ResourceQuota, a LimitRange, a
webhook), the DaemonSet itself is fine and its status only counts 0 pods; the reason is in
the FailedCreate events the DaemonSet controller records against it. These functions turn
the newest such event into a status reason and a message saying what to do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_PSA = re.compile(r'violates PodSecurity "([^"]+)"(?::\s*(.*))?', re.S)
_POD_SECURITY_FIX = (
    "the agents need hostPID, hostPath volumes and the capabilities BPF, PERFMON and "
    'SYS_PTRACE, which only the "privileged" Pod Security level allows: label the '
    "namespace pod-security.kubernetes.io/enforce=privileged, or create the session in a "
    "namespace that allows privileged pods (with --allow-cross-namespace it can target "
    "pods elsewhere)"
)


@dataclass(frozen=True, slots=True)
class AgentFailure:
    """Why agent pods are not being created (reason is CamelCase, message for humans)."""

    reason: str
    message: str


def _when(event: Mapping[str, Any]) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


def explain(events: Iterable[Mapping[str, Any]], namespace: str) -> AgentFailure | None:
    """The newest FailedCreate event, explained; None when there is none."""
    failed = [e for e in events if e.get("reason") == "FailedCreate"]
    if not failed:
        return None
    text = str(max(failed, key=_when).get("message") or "").strip()
    psa = _PSA.search(text)
    if psa:
        level, details = psa.group(1), (psa.group(2) or "").strip()
        return AgentFailure(
            "AgentsForbiddenByPodSecurity",
            f'agent pods are forbidden by Pod Security "{level}" enforced on namespace '
            f"{namespace!r}" + (f" ({details})" if details else "") + f": {_POD_SECURITY_FIX}",
        )
    if "exceeded quota" in text:
        quota = text[text.index("exceeded quota") :]
        return AgentFailure(
            "AgentsForbiddenByQuota",
            f"agent pods are refused by a ResourceQuota in namespace {namespace!r} ({quota}): "
            "raise the quota, or lower the agents' requests (operator flags)",
        )
    return AgentFailure(
        "AgentsNotCreated", f"the DaemonSet controller cannot create agent pods: {text[:500]}"
    )
