"""Ships spooled batches to the ingest API in order, with exponential backoff on failure.

Runs in its own thread so collection never waits for the network. The oldest batch goes
first; a batch leaves the spool only when the ingest says it is stored (or a duplicate).
A batch the ingest refuses as invalid (400/413/415/422), or a spool entry that is not a
batch at all, is quarantined and counted, and the next one goes: one bad batch never
blocks the ones behind it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kubeprof.agent.cluster.client import IngestClient, Outcome
from kubeprof.agent.cluster.spool import Spool

log = logging.getLogger("kubeprof.agent")
GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class Backoff:
    """Exponential backoff with full jitter, capped; reset after a success."""

    base_s: float = 0.5
    cap_s: float = 30.0
    rand: Callable[[], float] = random.random
    attempt: int = 0

    def next_delay(self) -> float:
        """Seconds to wait before the next attempt (grows 2x per failure, jittered)."""
        ceiling = min(self.cap_s, self.base_s * (2**self.attempt))
        self.attempt += 1
        return ceiling * (0.5 + 0.5 * self.rand())

    def reset(self) -> None:
        self.attempt = 0


# Plain counters: the likeness to other counter dataclasses (analysis's) is only shape.
@dataclass
class Stats:
    """What the shipper did, for logs and the agent's exit summary."""

    sent: int = 0
    duplicates: int = 0
    rows: int = 0
    retries: int = 0
    rejected: int = 0
    last_error: str = ""


@dataclass
class Shipper:
    """Drains `spool` through `client` until stopped (and the spool is empty or time is up)."""

    spool: Spool
    client: IngestClient
    backoff: Backoff = field(default_factory=Backoff)
    sleep: Callable[[float], None] = time.sleep
    stats: Stats = field(default_factory=Stats)
    forbidden: bool = False  # the ingest refused our token
    session_over: bool = False  # the session stopped accepting data
    clock: Callable[[], float] = time.monotonic
    _wake: threading.Event = field(default_factory=threading.Event)

    def ship_once(self) -> bool:
        """Try to send everything pending, oldest first. True when the spool is empty."""
        for item in self.spool.pending():
            try:
                body = item.path.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:  # a directory, no permission: not ours to send
                self.spool.quarantine(item.path, f"unreadable ({exc.strerror})")
                self.stats.rejected += 1
                continue
            if body[:2] != GZIP_MAGIC:  # not something this agent wrote
                self.spool.quarantine(item.path, "is not a gzip batch")
                self.stats.rejected += 1
                continue
            ans = self.client.post_batch(body, item.batch_id)
            if ans.outcome is Outcome.STORED:
                self.spool.done(item)
                self.backoff.reset()
                self.stats.sent += 1
                self.stats.rows += int(ans.data.get("rows", 0))
                self.stats.duplicates += int(bool(ans.data.get("duplicate")))
                continue
            if ans.outcome is Outcome.REJECTED:
                dest = self.spool.reject(item)
                self.stats.rejected += 1
                log.error(
                    "ingest rejected batch %s (HTTP %s: %s); kept in %s, sending the next",
                    item.batch_id,
                    ans.status,
                    ans.detail[:300],
                    dest,
                )
                continue
            # Forbidden, session over or unavailable: stop this pass, the batch stays.
            why = self.stats.last_error = f"HTTP {ans.status}: {ans.detail}"
            if ans.outcome is Outcome.FORBIDDEN:
                self.forbidden = True
                log.error("ingest refused our credentials (%s); batches stay spooled", why)
            elif ans.outcome is Outcome.SESSION_OVER:
                self.session_over = True
                left = len(self.spool.pending())
                log.warning(
                    "session no longer accepts data (%s); %d batch(es) left in the spool", why, left
                )
            else:
                self.stats.retries += 1
                log.warning(
                    "ingest unavailable (%s); batch %s stays spooled, retrying", why, item.batch_id
                )
            return False
        return True

    def run(self, stop: threading.Event) -> None:
        """Loop: ship, then wait for new work or the backoff delay, until `stop` is set.

        After a success a `kick()` ships a new batch at once; after a failure the backoff
        holds whatever is spooled meanwhile (a batch a second during an outage must not
        turn into a retry a second)."""
        while not stop.is_set():
            ok = self.ship_once()
            if self.forbidden or self.session_over:
                ok, delay = False, self.backoff.cap_s
            else:
                delay = 1.0 if ok else self.backoff.next_delay()
            retry_at = self.clock() + delay
            while not stop.is_set():
                self._wake.wait(max(0.0, retry_at - self.clock()))
                self._wake.clear()
                if ok or self.clock() >= retry_at:
                    break

    def kick(self) -> None:
        """New batch spooled: ship it now, unless the last attempt failed and its backoff
        delay has not passed yet."""
        self._wake.set()

    def drain(self, timeout_s: float, now: Callable[[], float] = time.monotonic) -> bool:
        """Final flush at exit: keep retrying until empty or `timeout_s`. True if empty."""
        deadline = now() + timeout_s
        while True:
            if self.ship_once():
                return True
            if self.forbidden or self.session_over or now() >= deadline:
                return False
            self.sleep(min(self.backoff.next_delay(), max(0.0, deadline - now())))
