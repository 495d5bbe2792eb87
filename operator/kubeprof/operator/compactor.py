"""Counting stored samples off the request path (`kubeprof.storage.compaction`).

A batch's transaction writes only its samples; this thread counts them into
`stack_counts` a moment later, so flame graphs read few rows. Readers are right either
way (they add the samples not counted yet): the thread only keeps that remainder small.
It runs while sessions have new batches and ends when a round finds none.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from kubeprof.storage import compaction

log = logging.getLogger(__name__)


class Compactor:
    """Compacts the sessions noted since its last round, every `every_s` seconds."""

    def __init__(self, engine: Engine, every_s: float = 1.0) -> None:
        self.engine, self.every_s = engine, every_s
        self._dirty: set[int] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def note(self, session_id: int) -> None:
        """A batch of the session committed: count it soon."""
        with self._lock:
            self._dirty.add(session_id)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="compactor", daemon=True)
                self._thread.start()

    def adopt(self) -> int:
        """Note every session a stopped operator left with samples not counted (it died
        between a batch and its count); how many. Run once at start."""
        with self.engine.connect() as conn:
            todo = compaction.uncounted(conn)
        for sid in todo:
            self.note(sid)
        return len(todo)

    def flush(self, session_id: int) -> int:
        """Count the session's samples now (before its aggregation); how many."""
        return compaction.compact(self.engine, session_id)

    def _run(self) -> None:
        while True:
            threading.Event().wait(self.every_s)
            with self._lock:
                todo, self._dirty = self._dirty, set()
                if not todo:
                    self._thread = None
                    return
            for sid in sorted(todo):
                try:
                    compaction.compact(self.engine, sid)
                except SQLAlchemyError as exc:
                    # Readers add what is not counted; the session's next batch retries.
                    log.warning("counting session %s's samples failed: %s", sid, exc)
