"""What each session has stored so far, so the next batch is bounded by the session.

Two things per session: the records stored (capped by `--ingest-max-session-rows`) and
each node's time extent (`kubeprof.protocol.bounds`: all of a node's records fit in the
session's duration + drain + clock skew). A batch is admitted, or refused naming the field,
before it is written; its rows are given back if it is not stored (a duplicate, a database
error), so a refused or failed batch leaves nothing behind, in the database or here.

Kept in memory; the first batch of a session after an operator restart reads what the
database holds for it (one query per session and process).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from kubeprof.model import Batch
from kubeprof.operator.registry import SessionEntry
from kubeprof.protocol import bounds, codec
from kubeprof.protocol.bounds import Extent
from kubeprof.protocol.limits import IngestLimits


class Refused(Exception):
    """A batch the session does not allow; `status` and `reason` as the ingest answers."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason = status, reason


@dataclass
class _Session:
    rows: int = 0
    extents: dict[str, Extent] = field(default_factory=dict)
    loaded: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


# session id -> (rows stored, node -> (earliest ns, latest ns)) as the database holds them
Loader = Callable[[int], tuple[int, dict[str, tuple[int, int]]]]


class SessionUsage:
    """Admits or refuses batches against their session's row quota and time window."""

    def __init__(self, limits: IngestLimits, slack_s: float, load: Loader) -> None:
        self.limits, self.slack_s, self._load = limits, slack_s, load
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, int], _Session] = {}

    def limit_ns(self, entry: SessionEntry) -> int:
        """The longest span one node's records of this session may cover."""
        known = entry.start_time > 0 and entry.end_time > entry.start_time
        duration = entry.end_time - entry.start_time if known else None
        return bounds.max_span_ns(duration, self.slack_s + self.limits.max_skew_s)

    def _session(self, entry: SessionEntry) -> _Session:
        with self._lock:
            key = (entry.uid, entry.db_id)
            s = self._sessions.get(key)
            if s is None:
                s = self._sessions[key] = _Session()
            return s

    def admit(self, entry: SessionEntry, node: str, batch: Batch) -> int:
        """Count `batch` in for `node`; returns its rows (give them back with `release`
        when it is not stored). Refused (413 quota, 422 a time out of bounds) otherwise."""
        s = self._session(entry)
        n = codec.rows(batch)
        limit = self.limit_ns(entry)
        with s.lock:
            if not s.loaded:
                rows, extents = self._load(entry.db_id)
                s.rows += rows
                for k, (lo, hi) in extents.items():
                    s.extents[k] = Extent(lo, hi)
                s.loaded = True
            cap = self.limits.max_session_rows
            if s.rows + n > cap:
                raise Refused(
                    413,
                    "quota",
                    f"session {entry.namespace}/{entry.name} holds {s.rows} records; "
                    f"this batch's {n} would pass the limit of {cap} per session "
                    "(--ingest-max-session-rows)",
                )
            try:
                ext = bounds.check(batch, limit, s.extents.get(node))
            except bounds.OutOfBounds as exc:
                raise Refused(422, "out_of_bounds", f"invalid batch: {exc}") from None
            if ext is not None:
                s.extents[node] = ext
            s.rows += n
        return n

    def release(self, entry: SessionEntry, rows: int) -> None:
        """Give back the rows of a batch that was not stored after all."""
        s = self._session(entry)
        with s.lock:
            s.rows -= rows

    def quota(self, entry: SessionEntry) -> dict[str, int] | None:
        """`.status.quota`: records stored and the most the session may store; None until
        this process has seen a batch of the session (the status keeps the last figure)."""
        with self._lock:
            s = self._sessions.get((entry.uid, entry.db_id))
        if s is None or not s.loaded:
            return None
        return {"records": s.rows, "maxRecords": self.limits.max_session_rows}

    def forget(self, entry: SessionEntry) -> None:
        """Drop what is kept for a session that is gone."""
        with self._lock:
            self._sessions.pop((entry.uid, entry.db_id), None)
