"""Garbage collection of the interned `stacks` and `frames` that sessions share.

Removing a session deletes its own rows by cascade; the stacks and frames it interned stay,
as other sessions may use them. `collect` then deletes the stacks no row refers to any more
and the frames no remaining stack lists. It works in chunks of ids, each its own short
transaction holding the interning lock exclusively (`intern.hold_collecting`), so ingest
into other sessions waits at most one chunk, and a stack a batch is writing right now (it
holds the lock shared) is never taken; a chunk that deleted rows raises the epoch, so every
Interner forgets its cached ids. Memory stays bounded: the frames still listed by a stack
are marked in a temporary table of the database, never read into Python.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Column, column, delete, exists, func, select, table, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import InstrumentedAttribute

from kubeprof.storage.intern import hold_collecting, raise_epoch
from kubeprof.storage.models import Base, FrameRow, StackRow

CHUNK = 5000
_LIVE = "kubeprof_gc_live_frames"
_live = table(_LIVE, column("id"))


@dataclass(frozen=True)
class Collected:
    """How many shared rows one collection deleted."""

    stacks: int
    frames: int


def stack_references() -> list[Column[int]]:
    """Every column that refers to a stack: its foreign key names `stacks.id`, or, not
    checked by the database, its ``info["refers_to"]`` does."""
    target = f"{StackRow.__tablename__}.id"
    return [
        fk.parent
        for t in Base.metadata.sorted_tables
        for fk in t.foreign_keys
        if fk.column.table.name == StackRow.__tablename__
    ] + [
        c
        for t in Base.metadata.sorted_tables
        for c in t.columns
        if c.info.get("refers_to") == target
    ]


def collect(engine: Engine, *, chunk: int = CHUNK) -> Collected:
    """Delete the stacks no row uses, then (when some went) the frames no stack lists."""
    with engine.connect() as conn:
        stacks = _collect_stacks(conn, chunk)
        frames = _collect_frames(conn, chunk) if stacks else 0
    return Collected(stacks, frames)


def _chunk_end(
    conn: Connection, id_col: InstrumentedAttribute[int], after: int, chunk: int
) -> int | None:
    """The id ending the next chunk of `chunk` ids above `after` (None: no more rows)."""
    ids = select(id_col.label("id")).where(id_col > after).order_by(id_col).limit(chunk)
    return conn.scalar(select(func.max(ids.subquery().c.id)))


def _collect_stacks(conn: Connection, chunk: int) -> int:
    unused = [~exists().where(ref == StackRow.id) for ref in stack_references()]
    with conn.begin():
        last = conn.scalar(select(func.max(StackRow.id)))
    # Stacks interned after this point are in use (or about to be): never looked at.
    total, after = 0, -1
    while last is not None and after < last:
        with conn.begin():
            hold_collecting(conn)
            end = _chunk_end(conn, StackRow.id, after, chunk)
            if end is None:
                break
            end = min(end, last)
            res = conn.execute(
                delete(StackRow).where(StackRow.id > after, StackRow.id <= end, *unused)
            )
            if res.rowcount:
                raise_epoch(conn)
        total += int(res.rowcount or 0)
        after = end
    return total


def _mark_sql(dialect: str) -> str:
    """Insert the frame ids listed by the stacks in (:lo, :hi] into the live table."""
    if dialect == "postgresql":
        return (
            f"INSERT INTO {_LIVE} (id) SELECT DISTINCT CAST(f AS BIGINT) FROM stacks "
            "CROSS JOIN LATERAL unnest(string_to_array(stacks.frame_ids, ',')) AS f "
            "WHERE stacks.id > :lo AND stacks.id <= :hi AND f <> '' ON CONFLICT DO NOTHING"
        )
    return (
        f"INSERT OR IGNORE INTO {_LIVE} (id) SELECT DISTINCT CAST(j.value AS INTEGER) "
        "FROM stacks, json_each('[' || stacks.frame_ids || ']') AS j "
        "WHERE stacks.id > :lo AND stacks.id <= :hi"
    )


def _collect_frames(conn: Connection, chunk: int) -> int:
    mark = text(_mark_sql(conn.dialect.name))
    with conn.begin():
        conn.execute(text(f"CREATE TEMPORARY TABLE IF NOT EXISTS {_LIVE} (id BIGINT PRIMARY KEY)"))
        conn.execute(delete(_live))
        hold_collecting(conn)  # nothing in flight: every stack up to `marked` is committed
        marked = conn.scalar(select(func.max(StackRow.id))) or 0
        last_frame = conn.scalar(select(func.max(FrameRow.id)))
    try:
        after = -1
        while after < marked:  # outside the lock: stacks up to `marked` only ever go
            with conn.begin():
                end = min(_chunk_end(conn, StackRow.id, after, chunk) or marked, marked)
                conn.execute(mark, {"lo": after, "hi": end})
            after = end
        total, after = 0, -1
        while last_frame is not None and after < last_frame:
            with conn.begin():
                hold_collecting(conn)
                # Stacks interned since the last look may list old frames: mark them too.
                newest = conn.scalar(select(func.max(StackRow.id))) or 0
                if newest > marked:
                    conn.execute(mark, {"lo": marked, "hi": newest})
                    marked = newest
                end = _chunk_end(conn, FrameRow.id, after, chunk)
                if end is None:
                    break
                end = min(end, last_frame)
                live = exists().where(_live.c.id == FrameRow.id)
                res = conn.execute(
                    delete(FrameRow).where(FrameRow.id > after, FrameRow.id <= end, ~live)
                )
                if res.rowcount:
                    raise_epoch(conn)
            total += int(res.rowcount or 0)
            after = end
        return total
    finally:
        with conn.begin():
            conn.execute(text(f"DROP TABLE IF EXISTS {_LIVE}"))
