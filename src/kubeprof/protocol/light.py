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
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Self, TypeVar

import msgspec

from kubeprof.protocol.settings import DEFAULT_CPU_HZ, DEFAULT_NVML_INTERVAL_S, AgentSettings

# Bound on what a heartbeat may claim, checked by the operator before it keeps anything.
MAX_NODE_NAME = 253
MAX_REASON = 300
MAX_RUNNING = 256

NodeName = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NODE_NAME)]
SessionUid = Annotated[str, msgspec.Meta(max_length=64)]
_T = TypeVar("_T")
_MISSING = re.compile(r"Object missing required field `(\w+)`")


class LightWireError(ValueError):
    """A heartbeat or answer that does not have the contract's shape (names the field)."""


def _decode(data: Any, kind: type[_T], what: str) -> _T:
    """`data` (parsed JSON) as `kind`, type-checked by msgspec as `codec` checks a batch;
    LightWireError names the first bad field."""
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        text, sep, path = str(exc).rpartition(" - at `")
        if not sep:
            text, path = str(exc), ""
        where = path.rstrip("`").removeprefix("$").removeprefix(".")
        missing = _MISSING.fullmatch(text)
        if missing:
            where = f"{where}.{missing[1]}" if where else missing[1]
        raise LightWireError(f"{where or what}: {text}") from None


class _Wire:
    """JSON both ways: `to_json` for json.dumps, `from_json` type-checked by `_decode`."""

    __slots__ = ()
    WHAT: ClassVar[str]  # names the whole object in an error

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out

    @classmethod
    def from_json(cls, data: Any) -> Self:
        return _decode(data, cls, cls.WHAT)


@dataclass(frozen=True, slots=True)
class Heartbeat(_Wire):
    """What a light agent tells the operator about itself."""

    WHAT: ClassVar[str] = "heartbeat"

    node: NodeName  # the node it runs on (downward API spec.nodeName)
    deep: bool  # it can profile deeply now (started with --deep and BPF preflight passed)
    reason: str = ""  # why not, when deep is false: shown in a session's status (cut)
    # session UIDs it profiles deeply now
    running: Annotated[tuple[SessionUid, ...], msgspec.Meta(max_length=MAX_RUNNING)] = ()

    @classmethod
    def from_json(cls, data: Any) -> Self:
        """The heartbeat in `data`; LightWireError names the first bad field."""
        hb = _decode(data, cls, cls.WHAT)  # slots: no zero-argument super()
        if len(hb.reason) > MAX_REASON:
            hb = dataclasses.replace(hb, reason=hb.reason[:MAX_REASON])
        return hb


@dataclass(frozen=True, slots=True)
class Assignment(_Wire):
    """One session a light agent profiles on its node, with what its collectors need."""

    WHAT: ClassVar[str] = "assignments[]"

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
        same = ("namespace", "session", "collectors", "cpu_hz", "nvml_interval_s")
        given = {n: getattr(self, n) for n in same}
        return dataclasses.replace(
            node, **given, session_uid=self.uid, end_time=self.end_time or None
        )


@dataclass(frozen=True, slots=True)
class Answer(_Wire):
    """The operator's answer to a heartbeat."""

    WHAT: ClassVar[str] = "answer"

    assignments: tuple[Assignment, ...] = ()
    revoked: tuple[str, ...] = ()  # session UIDs to stop here (the DaemonSet took the node)
