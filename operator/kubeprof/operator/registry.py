"""What the reconciler knows about live sessions, shared with the ingest API.

Only a cache: every entry is rebuilt from the CR status, the session's Secret and the
database by the next reconcile pass after a restart. Until then the ingest answers 503
and agents retry.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from kubeprof.operator.phases import Phase
from kubeprof.operator.targets import Target


@dataclass
class SessionEntry:
    """One session as the ingest API needs it."""

    namespace: str
    name: str
    uid: str
    db_id: int  # sessions.id in the results database
    token: str = field(repr=False)  # never logged
    phase: Phase = Phase.PENDING
    end_time: float = 0.0  # Unix seconds
    targets: list[Target] = field(default_factory=list)
    closed: bool = False  # aggregation started: no more batches
    inflight: int = 0  # batches being written right now (aggregation waits for them)

    def targets_on(self, node: str) -> list[Target]:
        return [t for t in self.targets if t.node == node]


class Registry:
    """Thread-safe map (namespace, name) -> SessionEntry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], SessionEntry] = {}

    def put(self, entry: SessionEntry) -> None:
        with self._lock:
            self._entries[(entry.namespace, entry.name)] = entry

    def get(self, namespace: str, name: str) -> SessionEntry | None:
        with self._lock:
            return self._entries.get((namespace, name))

    def remove(self, namespace: str, name: str) -> None:
        with self._lock:
            self._entries.pop((namespace, name), None)

    def phases(self) -> dict[str, int]:
        """Live sessions per phase (for the sessions-by-phase gauge)."""
        with self._lock:
            out: dict[str, int] = {}
            for e in self._entries.values():
                out[e.phase.value] = out.get(e.phase.value, 0) + 1
            return out
