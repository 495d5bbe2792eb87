"""Requests in flight, so the UI's background work can wait for a quiet moment.

`kubeprof ui` analyses finished sessions in the background (`server.warm`). On a big
session that is a decode of megabytes in one call that holds the GIL, and a page opened
meanwhile waits for it: the first flame graph, a few kB read back, took 0.4 s instead of
0.03 s. The warm-up therefore starts each session once no request has been in flight
for a short while, and never waits longer than a bound (a UI polled without pause still
gets its sessions analysed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class Activity:
    """How many requests are being answered, and since when none has been."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = 0
        self._idle_since = time.monotonic()

    @contextmanager
    def request(self) -> Iterator[None]:
        """Count one request while it is answered."""
        with self._cond:
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                self._idle_since = time.monotonic()
                self._cond.notify_all()

    def wait_quiet(self, quiet_s: float, most_s: float) -> bool:
        """Wait until no request has been in flight for `quiet_s` seconds (True), or for
        `most_s` seconds at the most (False)."""
        end = time.monotonic() + most_s
        with self._cond:
            while True:
                now = time.monotonic()
                if self._busy == 0 and now - self._idle_since >= quiet_s:
                    return True
                if now >= end:
                    return False
                left = end - now
                if self._busy == 0:
                    left = min(left, quiet_s - (now - self._idle_since))
                self._cond.wait(left)
