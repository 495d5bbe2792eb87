"""Bulk reads: a session's CPU samples and GPU records, loaded in as few Python steps as
the database allows.

A big session (10 M samples, 1 M kernels) is read whole by every report. Through
SQLAlchemy's rows each sample or kernel costs microseconds of Python; here, on PostgreSQL,
the rows come as plain tuples from the driver (binary format), and the samples of each
thread as two arrays built by the server (``array_agg``), so no sample ever becomes a row
object, nor a Python int: the arrays' binary form is copied into ``array('q')`` columns
in a few C passes (``_int8_array``). SQLite reads the same statements row by row.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable
from functools import cache
from itertools import islice
from operator import le
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.engine import Connection

from kubeprof.analysis.cpu_samples import ThreadSamples
from kubeprof.storage.models import SampleRow


def _psycopg(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg"


def driver_rows(
    conn: Connection, stmt: Select[*tuple[Any, ...]], *, raw_int8_arrays: bool = False
) -> list[tuple[Any, ...]]:
    """The rows of ``stmt`` as plain tuples: on PostgreSQL straight from psycopg's binary
    cursor (no SQLAlchemy Row per row, a third of the time at a million rows), in the
    connection's own transaction. The statement is our own; its values stay parameters.
    ``raw_int8_arrays`` (PostgreSQL): bigint[] values come as their binary form, bytes."""
    if not _psycopg(conn):
        return [tuple(r) for r in conn.execute(stmt)]
    compiled = stmt.compile(dialect=conn.dialect)
    raw = conn.connection.driver_connection
    assert raw is not None, "a live psycopg connection is needed"
    with raw.cursor(binary=True) as cur:
        if raw_int8_arrays:
            cur.adapters.register_loader(INT8_ARRAY_OID, _raw_loader())
        cur.execute(str(compiled), compiled.params)
        return cur.fetchall()


def thread_columns(
    conn: Connection, session_id: int, node: str | None = None
) -> tuple[list[ThreadSamples], dict[int, int]]:
    """Each thread's samples, in (pid, tid) order, as time-sorted ``array('q')`` columns of
    timestamps and dense stack indexes; and stack id -> index, numbered in order of first
    appearance (threads in order, each in time order), as a row-by-row read numbers them.

    A thread's name is the one of its earliest sample. Samples of one thread with the same
    timestamp keep the table's order (a sampler never takes two of one thread at once).
    ``node``: only that node's samples (pids and clocks are each node's own)."""
    groups: dict[tuple[int, int], list[tuple[str, array[int], array[int]]]] = {}
    for pid, tid, thread, ts, ids in _sample_groups(conn, session_id, node):
        groups.setdefault((pid, tid), []).append((thread, ts, ids))
    threads: list[ThreadSamples] = []
    index: dict[int, int] = {}
    for (pid, tid), parts in sorted(groups.items()):
        name = min(parts, key=lambda p: min(p[1]))[0] if len(parts) > 1 else parts[0][0]
        ts, ids = parts[0][1], parts[0][2]
        for _, more_ts, more_ids in parts[1:]:
            ts, ids = ts + more_ts, ids + more_ids
        ts, ids = _time_sorted(ts, ids)
        for sid in dict.fromkeys(ids):  # first appearance, at C speed
            index.setdefault(sid, len(index))
        threads.append(ThreadSamples(pid, tid, name, ts, array("q", map(index.__getitem__, ids))))
    return threads, index


def _sample_groups(
    conn: Connection, session_id: int, node: str | None = None
) -> Iterable[tuple[int, int, str, array[int], array[int]]]:
    """(pid, tid, thread name, timestamps, stack ids) per thread and name, unsorted."""
    t = SampleRow.__table__
    where = [t.c.session_id == session_id] + ([t.c.node == node] if node is not None else [])
    if _psycopg(conn):
        q = (
            select(
                t.c.pid,
                t.c.tid,
                t.c.thread,
                func.array_agg(t.c.ts_ns),
                func.array_agg(t.c.stack_id),
            )
            .where(*where)
            .group_by(t.c.pid, t.c.tid, t.c.thread)
        )
        return [
            (pid, tid, thread, _int8_array(ts), _int8_array(ids))
            for pid, tid, thread, ts, ids in driver_rows(conn, q, raw_int8_arrays=True)
        ]
    out: dict[tuple[int, int, str], tuple[array[int], array[int]]] = {}
    q2 = select(t.c.pid, t.c.tid, t.c.thread, t.c.ts_ns, t.c.stack_id).where(*where)
    for pid, tid, thread, ts_ns, stack_id in conn.execute(q2.order_by(t.c.id)):
        ts, ids = out.setdefault((pid, tid, thread), (array("q"), array("q")))
        ts.append(ts_ns)
        ids.append(stack_id)
    return [(p, t_, th, ts, ids) for (p, t_, th), (ts, ids) in out.items()]


INT8_ARRAY_OID = 1016  # PostgreSQL's bigint[]


@cache
def _raw_loader() -> type:
    """A psycopg loader of bigint[] in PostgreSQL's binary form, as bytes (``_int8_array``
    reads them); psycopg imported only when a PostgreSQL store is read."""
    from psycopg.abc import Buffer
    from psycopg.adapt import Loader
    from psycopg.pq import Format

    class RawLoader(Loader):
        format = Format.BINARY

        def load(self, data: Buffer) -> bytes:
            return bytes(data)

    return RawLoader


def _int8_array(raw: bytes) -> array[int]:
    """A one-dimensional bigint[] without NULLs, from its binary form, as ``array('q')``.

    The form: ndim, has-null flag and element type (int32 each), then per dimension its
    length and lower bound, then each element as an int32 length (8) and 8 big-endian
    bytes. The 8 value bytes of every 12-byte element are gathered by 8 strided copies and
    byte-swapped to the machine's order: no Python int per element."""
    ndim, has_null, _ = struct.unpack_from(">iiI", raw)
    out = array("q")
    if ndim == 0:
        return out
    if ndim != 1 or has_null:
        raise ValueError(f"expected a bigint[] of one dimension without NULLs (ndim {ndim})")
    (n,) = struct.unpack_from(">i", raw, 12)
    if len(raw) != 20 + 12 * n:
        raise ValueError(f"bigint[] of {n} elements has {len(raw) - 20} bytes, not {12 * n}")
    packed = bytearray(8 * n)
    for k in range(8):  # strided slices of bytes are C loops (of a memoryview, not)
        packed[k::8] = raw[24 + k :: 12]
    out.frombytes(packed)
    if sys.byteorder == "little":
        out.byteswap()
    return out


def _time_sorted(ts: array[int], ids: array[int]) -> tuple[array[int], array[int]]:
    """The two parallel columns in timestamp order (stable). Samples are stored about in
    time order, so the check (one C pass comparing neighbours) is the usual cost."""
    if all(map(le, ts, islice(ts, 1, None))):
        return ts, ids
    order = sorted(range(len(ts)), key=ts.__getitem__)
    return array("q", map(ts.__getitem__, order)), array("q", map(ids.__getitem__, order))
