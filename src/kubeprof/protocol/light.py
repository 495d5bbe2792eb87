"""The light agent <-> operator contract for going deep: one heartbeat, one answer.

A light agent started with ``--deep`` POSTs a `Heartbeat` to `routes.LIGHT_ASSIGNMENTS`
every few seconds with the light agents' shared bearer token; the operator answers with
the sessions whose pods on that node the agent is to profile (`Assignment`, carrying the
session's own ingest token) and the sessions it must stop (`revoked`: moved to the
per-session DaemonSet). The light agent then runs the ordinary node agent for each
assignment, which asks the ingest for its targets and ships with the session's token.

Pulled, not pushed: the light agent already reaches the operator's ingest to ship, so no
listener that could switch deep profiling on is added on the nodes, and neither side
needs Kubernetes API rights for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeprof.protocol.settings import DEFAULT_CPU_HZ, DEFAULT_NVML_INTERVAL_S, AgentSettings

# Bound on what a heartbeat may claim, checked by the operator before it keeps anything.
MAX_NODE_NAME = 253
MAX_REASON = 300
MAX_RUNNING = 256


class LightWireError(ValueError):
    """A heartbeat or answer that does not have the contract's shape (names the field)."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """What a light agent tells the operator about itself."""

    node: str  # the node it runs on (downward API spec.nodeName)
    deep: bool  # it can profile deeply now (started with --deep and BPF preflight passed)
    reason: str = ""  # why not, when deep is false: shown in a session's status
    running: tuple[str, ...] = ()  # session UIDs it profiles deeply now

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "deep": self.deep,
            "reason": self.reason,
            "running": list(self.running),
        }

    @classmethod
    def from_json(cls, data: Any) -> Heartbeat:
        """The heartbeat in `data`; LightWireError names the first bad field."""
        if not isinstance(data, Mapping):
            raise LightWireError("heartbeat: expected a JSON object")
        node, deep = data.get("node"), data.get("deep")
        reason, running = data.get("reason", ""), data.get("running", [])
        if not isinstance(node, str) or not 0 < len(node) <= MAX_NODE_NAME:
            raise LightWireError(f"node: a node name of 1..{MAX_NODE_NAME} characters")
        if not isinstance(deep, bool):
            raise LightWireError("deep: true or false")
        if not isinstance(reason, str):
            raise LightWireError("reason: a string")
        if (
            not isinstance(running, list)
            or len(running) > MAX_RUNNING
            or not all(isinstance(u, str) and len(u) <= 64 for u in running)
        ):
            raise LightWireError(f"running: a list of at most {MAX_RUNNING} session UIDs")
        return cls(node, deep, reason[:MAX_REASON], tuple(running))


@dataclass(frozen=True, slots=True)
class Assignment:
    """One session a light agent profiles on its node, with what its collectors need."""

    namespace: str  # the ProfilingSession's namespace and name
    session: str
    uid: str  # the session's UID: a re-created session of the same name is a new one
    token: str = field(repr=False)  # the session's ingest token: kept in memory, never logged
    collectors: tuple[str, ...] = ("cpu",)  # as AgentSettings.collectors
    cpu_hz: int = DEFAULT_CPU_HZ
    nvml_interval_s: float = DEFAULT_NVML_INTERVAL_S
    end_time: float = 0.0  # Unix seconds; 0: not known (the targets answer tells)

    def settings(self, node: AgentSettings) -> AgentSettings:
        """The node agent's settings for this session: `node`'s (the light agent's node,
        ingest, spool and intervals) with the session's own fields from this assignment."""
        return dataclasses.replace(
            node,
            namespace=self.namespace,
            session=self.session,
            session_uid=self.uid,
            collectors=self.collectors,
            cpu_hz=self.cpu_hz,
            nvml_interval_s=self.nvml_interval_s,
            end_time=self.end_time or None,
        )

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["collectors"] = list(self.collectors)
        return d

    @classmethod
    def from_json(cls, data: Any) -> Assignment:
        if not isinstance(data, Mapping):
            raise LightWireError("assignments[]: expected a JSON object")
        try:
            return cls(
                str(data["namespace"]),
                str(data["session"]),
                str(data["uid"]),
                str(data["token"]),
                tuple(str(c) for c in data.get("collectors", [])),
                int(data.get("cpu_hz", DEFAULT_CPU_HZ)),
                float(data.get("nvml_interval_s", DEFAULT_NVML_INTERVAL_S)),
                float(data.get("end_time", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise LightWireError(f"assignments[]: {exc}") from None


@dataclass(frozen=True, slots=True)
class Answer:
    """The operator's answer to a heartbeat."""

    assignments: tuple[Assignment, ...] = ()
    revoked: tuple[str, ...] = ()  # session UIDs to stop here (the DaemonSet took the node)

    def to_json(self) -> dict[str, Any]:
        return {
            "assignments": [a.to_json() for a in self.assignments],
            "revoked": list(self.revoked),
        }

    @classmethod
    def from_json(cls, data: Any) -> Answer:
        if not isinstance(data, Mapping):
            raise LightWireError("answer: expected a JSON object")
        raw, revoked = data.get("assignments", []), data.get("revoked", [])
        if not isinstance(raw, list) or not isinstance(revoked, list):
            raise LightWireError("assignments/revoked: lists")
        return cls(tuple(Assignment.from_json(a) for a in raw), tuple(str(u) for u in revoked))
