"""A typed, frozen view of one ProfilingSession object, built once per reconcile pass.

kopf hands the reconciler the raw object (`body`); the pass's steps read its names and
what the last pass wrote into `.status` through this view instead of indexing the dict
again in every helper. The spec has its own typed form (spec.py), parsed separately
because a bad spec is an outcome of the pass, not an error of the view.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubeprof.operator.phases import Phase

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # how .status spells a moment (RFC 3339, whole seconds)


def iso(ts: float) -> str:
    """`ts` (Unix seconds) as .status writes it."""
    return datetime.fromtimestamp(ts, UTC).strftime(TIME_FORMAT)


def from_iso(text: str | None) -> float | None:
    """Unix seconds of a .status time; None when absent or empty."""
    if not text:
        return None
    return datetime.strptime(text, TIME_FORMAT).replace(tzinfo=UTC).timestamp()


@dataclass(frozen=True, slots=True)
class SessionView:
    """The names of a ProfilingSession and what its `.status` says, read-only.

    `body` stays reachable for the builders (build.py, tenancy.py) whose output is the
    Kubernetes object itself; the status readings are properties, read when a step needs
    them, so a malformed field fails only the step that reads it (as it always did).
    """

    namespace: str
    name: str
    uid: str
    generation: int
    body: Mapping[str, Any]
    status: Mapping[str, Any]  # .status as the last pass left it, without kopf's own key

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> SessionView:
        meta = body["metadata"]
        status = {k: v for k, v in (body.get("status") or {}).items() if k != "kopf"}
        return cls(
            meta["namespace"], meta["name"], meta["uid"], meta.get("generation", 1), body, status
        )

    @property
    def meta(self) -> Mapping[str, Any]:
        return self.body["metadata"]

    @property
    def raw_spec(self) -> Mapping[str, Any]:
        return self.body.get("spec") or {}

    @property
    def phase(self) -> Phase | None:
        """The phase the last pass wrote; None before the first."""
        return Phase(self.status["phase"]) if self.status.get("phase") else None

    @property
    def start_time(self) -> float | None:
        return from_iso(self.status.get("startTime"))

    @property
    def end_time(self) -> float | None:
        return from_iso(self.status.get("endTime"))

    @property
    def drain_until(self) -> float:
        """When the drain after the end stops (0 before it began)."""
        return from_iso(self.status.get("drainUntil")) or 0.0

    @property
    def ever_matched(self) -> bool:
        return bool(self.status.get("everMatched"))

    @property
    def stored(self) -> bool:
        """Whether a pass got as far as making the session's database row."""
        return bool(self.status.get("storeSession"))

    @property
    def aggregation_failures(self) -> int:
        return int(self.status.get("aggregationFailures") or 0)
