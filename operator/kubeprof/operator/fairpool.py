"""A thread pool that takes sessions in turn, so one session cannot starve the others.

The ingest decodes and writes batches on a few threads shared by every session. With a
plain FIFO pool, a session sending many large batches queues them all ahead of another
session's small one. Here each session (key) has its own queue, and a free worker takes
the next job of the waiting session that has the fewest jobs running (ties in
round-robin order). A session alone may use every worker; as soon as another one waits,
it gets the next worker that frees up, so it waits at most for one batch already being
written (the ingest's row limit bounds that), never for a backlog.

That bound is still one large batch as long as every worker is busy, and three sessions
sending at full rate keep them all busy. So `reserve` workers are kept for keys that are
*light*: nothing running and a single job waiting (an agent that sends one batch at a time
and waits for the answer). Keys with a backlog share the other workers; a light key's job
starts as soon as it comes while a reserved worker is free.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any


class FairPool:
    """Fewest-running-first, round-robin among equals; optionally at most `per_key` jobs
    of one key at once (None: no cap, a lone key may use every worker), and `reserve` of
    the workers only for light keys (nothing running, one job waiting)."""

    def __init__(
        self, workers: int, *, per_key: int | None = None, reserve: int = 0, name: str = "fair"
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if not 0 <= reserve < workers:
            raise ValueError(f"reserve must be 0 to {workers - 1}, got {reserve}")
        self.per_key = per_key or workers
        self.workers, self.reserve = workers, reserve
        self._cond = threading.Condition()
        self._queues: dict[Hashable, deque[tuple[Future[Any], Callable[[], Any]]]] = {}
        self._turns: deque[Hashable] = deque()  # keys with queued jobs, next first
        self._running: dict[Hashable, int] = {}
        self._stopped = False
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(workers)
        ]
        for t in self._threads:
            t.start()

    def submit(self, key: Hashable, fn: Callable[[], Any]) -> Future[Any]:
        """Queue fn() under `key`; its Future carries the result or the exception."""
        fut: Future[Any] = Future()
        with self._cond:
            if self._stopped:
                raise RuntimeError("pool is shut down")
            q = self._queues.get(key)
            if q is None:
                q = self._queues[key] = deque()
                self._turns.append(key)
            q.append((fut, fn))
            self._cond.notify()
        return fut

    def queued(self, key: Hashable) -> int:
        """Jobs of `key` waiting or running (the ingest's per-session back-pressure)."""
        with self._cond:
            return len(self._queues.get(key, ())) + self._running.get(key, 0)

    def _take(self) -> tuple[Hashable, Future[Any], Callable[[], Any]] | None:
        """The next job: of the waiting key with the fewest running, earliest in turn
        among equals; only a light key's while no more than `reserve` workers are idle
        (called with the lock held)."""
        best, fewest = -1, self.per_key
        scarce = self.workers - sum(self._running.values()) <= self.reserve
        for i, key in enumerate(self._turns):
            running = self._running.get(key, 0)
            if scarce and (running or len(self._queues[key]) > 1):
                continue  # the reserved workers wait for a light key
            if running < fewest:
                best, fewest = i, running
                if running == 0:
                    break
        if best < 0:
            return None
        key = self._turns[best]
        del self._turns[best]
        q = self._queues[key]
        fut, fn = q.popleft()
        if q:
            self._turns.append(key)  # its next job waits for the others' turns
        else:
            del self._queues[key]
        self._running[key] = fewest + 1
        return key, fut, fn

    def _work(self) -> None:
        while True:
            with self._cond:
                job = self._take()
                while job is None:
                    if self._stopped:
                        return
                    self._cond.wait()
                    job = self._take()
            key, fut, fn = job
            try:
                if fut.set_running_or_notify_cancel():
                    try:
                        fut.set_result(fn())
                    except BaseException as exc:  # noqa: BLE001 - handed to the waiter
                        fut.set_exception(exc)
            finally:
                with self._cond:
                    left = self._running[key] - 1
                    if left:
                        self._running[key] = left
                    else:
                        del self._running[key]
                    self._cond.notify_all()
                # An exception's traceback holds this frame: drop the job now, so the
                # future (and whatever its traceback keeps alive) is not held until the
                # next job or the garbage collector.
                job = fut = fn = None  # type: ignore[assignment]

    def shutdown(self, wait: bool = True) -> None:
        """Finish queued jobs, then stop the threads."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if wait:
            for t in self._threads:
                t.join()
