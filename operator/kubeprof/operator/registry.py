"""What the reconciler knows about live sessions, shared with the ingest API.

Only a cache: every entry is rebuilt from the CR status, the session's Secret and the
database by the next reconcile pass after a restart. Until then the ingest answers 503
and agents retry.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from kubeprof.operator.phases import Phase
from kubeprof.operator.targets import Target


class SessionClosed(Exception):
    """A batch reached its commit after the session was sealed for aggregation."""


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
    inflight: int = 0  # batches being received or written (aggregation waits for them)
    sealed: bool = False  # closed and done waiting: no batch may commit any more
    start_time: float = 0.0  # Unix seconds; 0 = not known (records get the CRD's longest span)
    _count_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _commit_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def targets_on(self, node: str) -> list[Target]:
        return [t for t in self.targets if t.node == node]

    # The ingest counts a batch in *before* reading its body and out after its commit;
    # aggregation closes the door, waits for the batches inside, then seals: a batch still
    # unfinished by then is refused at commit, so nothing lands after the aggregates.
    def enter(self) -> bool:
        """Count one batch in; False when the session is closed (refuse it)."""
        with self._count_lock:
            if self.closed:
                return False
            self.inflight += 1
            return True

    def leave(self) -> None:
        with self._count_lock:
            self.inflight -= 1

    def close(self, timeout_s: float) -> int:
        """Stop taking batches, wait up to timeout_s for those inside, then seal.
        Returns how many were still unfinished (they will be refused at commit)."""
        with self._count_lock:
            self.closed = True
        deadline = time.monotonic() + timeout_s
        while self.inflight > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        with self._commit_lock:
            self.sealed = True
        return self.inflight

    def reopen(self) -> None:
        """Aggregation failed: take batches again until the next attempt."""
        with self._commit_lock, self._count_lock:
            self.closed = self.sealed = False

    @contextmanager
    def committing(self) -> Iterator[None]:
        """Hold while committing a batch; raises SessionClosed once the session is sealed."""
        with self._commit_lock:
            if self.sealed:
                raise SessionClosed(
                    f"session {self.namespace}/{self.name} closed for "
                    "aggregation while this batch was arriving"
                )
            yield


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
