"""What each session has stored so far, so the next batch is bounded by the session.

Per session: the records stored (capped by `--ingest-max-session-rows`), the frames and
stacks it added to the tables all sessions share (`--ingest-max-session-frames/-stacks`:
rows another session added first cost it nothing), and each node's time extent
(`kubeprof.protocol.bounds`: all of a node's records fit in the session's duration + drain
+ clock skew). A batch is admitted, or refused naming the field, before it is written; its
frames and stacks are counted inside its transaction before the commit (only interning
tells which are new), so a batch past those limits is rolled back whole. What a batch
counted is given back if it is not stored (a duplicate, a database error), so a refused or
failed batch leaves nothing behind, in the database or here.

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
class Charge:
    """What one batch counts against its session; given back when it is not stored."""

    records: int
    frames: int = 0
    stacks: int = 0


@dataclass
class _Session:
    rows: int = 0
    frames: int = 0
    stacks: int = 0
    extents: dict[str, Extent] = field(default_factory=dict)
    loaded: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


# session id -> ((records, frames, stacks) stored, node -> (earliest ns, latest ns)) as the
# database holds them
Loader = Callable[[int], tuple[tuple[int, int, int], dict[str, tuple[int, int]]]]


class SessionUsage:
    """Admits or refuses batches against their session's quotas and time window."""

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

    def admit(self, entry: SessionEntry, node: str, batch: Batch) -> Charge:
        """Count `batch` in for `node` (give it back with `release` when it is not
        stored). Refused (413 quota, 422 a time out of bounds) otherwise."""
        s = self._session(entry)
        n = codec.rows(batch)
        limit = self.limit_ns(entry)
        with s.lock:
            if not s.loaded:
                (rows, frames, stacks), extents = self._load(entry.db_id)
                s.rows += rows
                s.frames += frames
                s.stacks += stacks
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
        return Charge(n)

    def interning(self, entry: SessionEntry, charge: Charge) -> Callable[[int, int], None]:
        """The batch writer's `interned(frames, stacks)` for `charge`'s batch: counts what
        it added to the shared tables, or refuses it (413) past either limit."""
        s = self._session(entry)

        def interned(frames: int, stacks: int) -> None:
            with s.lock:
                for kind, new, used, cap in (
                    ("frames", frames, s.frames, self.limits.max_session_frames),
                    ("stacks", stacks, s.stacks, self.limits.max_session_stacks),
                ):
                    if used + new > cap:
                        raise Refused(
                            413,
                            "quota",
                            f"{kind}: session {entry.namespace}/{entry.name} added {used} "
                            f"{kind} to the shared table; this batch's {new} new ones would "
                            f"pass the limit of {cap} per session "
                            f"(--ingest-max-session-{kind}); nothing of it was stored",
                        )
                s.frames += frames
                s.stacks += stacks
                charge.frames += frames
                charge.stacks += stacks

        return interned

    def release(self, entry: SessionEntry, charge: Charge) -> None:
        """Give back what a batch that was not stored after all counted."""
        s = self._session(entry)
        with s.lock:
            s.rows -= charge.records
            s.frames -= charge.frames
            s.stacks -= charge.stacks

    def quota(self, entry: SessionEntry) -> dict[str, int] | None:
        """`.status.quota`: per kind what the session used and its limit (records stored;
        frames and stacks it added to the shared tables); None until this process has
        seen a batch of the session (the status keeps the last figure)."""
        with self._lock:
            s = self._sessions.get((entry.uid, entry.db_id))
        if s is None or not s.loaded:
            return None
        return {
            "records": s.rows,
            "maxRecords": self.limits.max_session_rows,
            "frames": s.frames,
            "maxFrames": self.limits.max_session_frames,
            "stacks": s.stacks,
            "maxStacks": self.limits.max_session_stacks,
        }

    def forget(self, entry: SessionEntry) -> None:
        """Drop what is kept for a session that is gone."""
        with self._lock:
            self._sessions.pop((entry.uid, entry.db_id), None)
