"""A read run on a second connection beside the caller's: two big reads of one session
overlap.

A big session's report waits on two long reads: the CPU samples, which the server groups
into per-thread arrays (about 6 s of server time at 10 M samples here), and the GPU
records, which the client turns into objects (seconds of Python). Run one after the other,
the client idles through the first and the server through the second. On PostgreSQL the
samples' read runs on a thread with its own pooled connection (the driver waits for the
server without the GIL); on SQLite, one file and one writer, it runs on the caller's
connection when asked for, as before. Each read sees the committed data when it starts, as
two statements on one connection (read committed) always have.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from sqlalchemy.engine import Connection

T = TypeVar("T")


class SideRead(Generic[T]):
    """``read(connection)``, started at once beside the caller on PostgreSQL; ``result()``
    waits for it (and raises what it raised)."""

    def __init__(self, conn: Connection, read: Callable[[Connection], T]) -> None:
        self._conn, self._read = conn, read
        self._future: Future[T] | None = None
        if conn.dialect.name == "postgresql":
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kubeprof-read")
            self._future = pool.submit(self._beside, conn)
            pool.shutdown(wait=False)

    def _beside(self, conn: Connection) -> T:
        with conn.engine.connect() as other:
            return self._read(other)

    def result(self) -> T:
        """The read's result: waited for on PostgreSQL, read now on the caller's connection
        otherwise."""
        if self._future is None:
            return self._read(self._conn)
        return self._future.result()
