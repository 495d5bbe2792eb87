"""The store: open a database at the current schema, write batches, close cleanly."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Unpack

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DatabaseError, SQLAlchemyError

from kubeprof.model import Batch, stack_hash
from kubeprof.storage import compaction, cpu_samples, migrate, models, offcpu, sessions
from kubeprof.storage.bulk import dialect_insert, insert_rows
from kubeprof.storage.intern import Interner
from kubeprof.store_location import default_url, prepare_sqlite_path


class StoreError(RuntimeError):
    """A storage problem, phrased for the user: what failed and how to fix it."""


def _prepare_sqlite_path(url: str) -> None:
    problem = prepare_sqlite_path(url)
    if problem:
        raise StoreError(problem)


def _sqlite_pragmas(dbapi_conn: object, _record: object) -> None:
    cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


class Store:
    """A kubeprof database. Thread-compatible (one writer per Store object)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.interner = Interner()

    @classmethod
    def open(cls, url: str | None = None, *, migrate_schema: bool = True) -> Store:
        """Open (and migrate to the current schema) the database at `url`."""
        url = url or default_url()
        if url.startswith("sqlite"):
            _prepare_sqlite_path(url)
        elif url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        try:
            engine = create_engine(url, pool_pre_ping=True)
        except (SQLAlchemyError, ValueError) as exc:
            raise StoreError(
                f"bad store URL {url!r}: {exc}; expected sqlite:///PATH "
                "or postgresql+psycopg://USER@HOST:PORT/DB"
            ) from exc
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_pragmas)
        store = cls(engine)
        if migrate_schema:
            try:
                with engine.begin() as conn:
                    migrate.upgrade(conn)
            except DatabaseError as exc:  # OperationalError, or "file is not a database"
                engine.dispose()
                why = " ".join(str(exc.orig).split())  # one line (psycopg's span several)
                raise StoreError(
                    f"cannot open the store {engine.url!r}: {why}; check "
                    "the URL and that the database is up and writable"
                ) from exc
        return store

    def close(self) -> None:
        self.engine.dispose()

    # -- sessions -------------------------------------------------------------------------

    def create_session(self, name: str, **fields: Unpack[sessions.NewSession]) -> int:
        """Create a session (`sessions.create`: its fields and their defaults); a taken
        name gets a numeric suffix. Returns its id."""
        with self.engine.begin() as conn:
            return sessions.create(conn, name, **fields)

    def finish_session(
        self,
        session_id: int,
        *,
        status: str = "completed",
        end_ns: int = 0,
        meta: Mapping[str, str] | None = None,
    ) -> None:
        """Mark a session ended; `meta` entries are merged into the stored ones."""
        with self.engine.begin() as conn:
            sessions.finish(conn, session_id, status, end_ns=end_ns, meta=meta)
        compaction.compact(self.engine, session_id)  # count its samples once, now

    def settle(self, session_ids: Collection[int] | None = None) -> int:
        """Count the samples of these sessions (default all) that no writer counted (a
        killed recording's), so later reads need not add them; how many."""
        return compaction.settle(self.engine, session_ids)

    # -- data -------------------------------------------------------------------------------

    def write_batch(self, session_id: int, batch: Batch, *, node: str = "") -> int:
        """Store one batch in one transaction. Returns the number of rows written."""
        with self.engine.begin() as conn:
            return write_batch(conn, self.interner, session_id, batch, node=node)


def write_batch(
    conn: Connection, interner: Interner, session_id: int, batch: Batch, *, node: str = ""
) -> int:
    """Write `batch` on an open transaction (the ingest API adds its idempotency row to it)."""
    # A decoded batch's samples share one tuple per distinct stack: hash each tuple once
    # (hashing a 24-frame stack hashes 24 frames; per sample, three times, it was a fifth
    # of ingest), the batch holding the tuples alive while their ids key this map.
    distinct = {id(s.stack): s.stack for s in batch.samples}
    distinct.update((id(a.stack), a.stack) for a in batch.gpu_activities if a.stack)
    ids = interner.stack_ids_for(conn, distinct.values()) if distinct else {}
    sid = {k: ids[stack_hash(stack)] for k, stack in distinct.items()}
    samples: list[cpu_samples.SampleTuple] = [
        (session_id, node, s.ts_ns, s.pid, s.tid, s.cpu, s.thread, sid[id(s.stack)])
        for s in batch.samples
    ]
    cpu_samples.write(conn, samples)
    activities = [
        {
            "session_id": session_id,
            "node": node,
            "kind": a.kind,
            "name": a.name,
            "demangled": a.demangled,
            "start_ns": a.start_ns,
            "end_ns": a.end_ns,
            "device": a.device,
            "pid": a.pid,
            "correlation_id": a.correlation_id,
            "stream": a.stream,
            "grid_x": a.grid[0],
            "grid_y": a.grid[1],
            "grid_z": a.grid[2],
            "block_x": a.block[0],
            "block_y": a.block[1],
            "block_z": a.block[2],
            "registers": a.registers,
            "shared_mem": a.shared_mem,
            "bytes": a.bytes,
            "stack_id": sid[id(a.stack)] if a.stack else None,
            "launch_ns": a.launch_ns,
            "launch_tid": a.launch_tid,
        }
        for a in batch.gpu_activities
    ]
    insert_rows(conn, models.GpuActivityRow, activities)
    metrics = [
        {
            "session_id": session_id,
            "node": node,
            "ts_ns": m.ts_ns,
            "device": m.device,
            "metric": m.metric,
            "value": m.value,
            "pid": m.pid,
            "correlation_id": m.correlation_id,
        }
        for m in batch.gpu_metrics
    ]
    insert_rows(conn, models.GpuMetricRow, metrics)
    _upsert_processes(conn, session_id, node, batch)
    _add_counters(conn, session_id, node, batch.counters)
    _upsert_tracers(conn, session_id, node, batch)
    waits = offcpu.write(conn, interner, session_id, node, batch.offcpu_samples)
    return (
        len(samples)
        + len(activities)
        + len(metrics)
        + len(batch.processes)
        + len(batch.gpu_tracers)
        + waits
    )


def _upsert_tracers(conn: Connection, session_id: int, node: str, batch: Batch) -> None:
    """The latest answer per (pod, control socket) wins: the agent re-sends on change."""
    if not batch.gpu_tracers:
        return
    updated = ("pid", "state", "reason")
    rows = {
        (t.pod_uid, t.socket): {
            "session_id": session_id,
            "node": node,
            "pod_uid": t.pod_uid,
            "socket": t.socket,
            **{k: getattr(t, k) for k in updated},
        }
        for t in batch.gpu_tracers
    }
    _upsert(conn, models.GpuTracerRow, list(rows.values()), ("pod_uid", "socket"), updated)


def _upsert_processes(conn: Connection, session_id: int, node: str, batch: Batch) -> None:
    if not batch.processes:
        return
    updated = ("ppid", "name", "cmdline", "container_id", "pod_uid")
    rows = {
        p.pid: {"session_id": session_id, "node": node, "pid": p.pid}
        | {k: getattr(p, k) for k in updated}
        for p in batch.processes
    }
    _upsert(conn, models.ProcessRow, list(rows.values()), ("pid",), updated)


def _upsert(
    conn: Connection,
    row: type[models.Base],
    rows: list[dict[str, Any]],
    key: tuple[str, ...],
    updated: tuple[str, ...],
) -> None:
    """Insert `rows` of a node's table keyed by (session, node, *key); a row already there
    takes the `updated` columns of the new one."""
    stmt = dialect_insert(conn, row)
    stmt = stmt.on_conflict_do_update(
        index_elements=["session_id", "node", *key],
        set_={k: getattr(stmt.excluded, k) for k in updated},
    )
    conn.execute(stmt, rows)


def _add_counters(
    conn: Connection, session_id: int, node: str, counters: Mapping[str, int]
) -> None:
    if not counters:
        return
    stmt = dialect_insert(conn, models.CounterRow)
    stmt = stmt.on_conflict_do_update(
        index_elements=["session_id", "node", "name"],
        set_={"value": models.CounterRow.__table__.c.value + stmt.excluded.value},
    )
    conn.execute(
        stmt,
        [
            {"session_id": session_id, "node": node, "name": k, "value": int(v)}
            for k, v in counters.items()
        ],
    )


def upsert_session_aggregates(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Write session_aggregates rows, replacing earlier ones of the same (session, scope,
    key): re-running an aggregation (after an operator restart) changes nothing."""
    if not rows:
        return
    ins = dialect_insert(conn, models.SessionAggregateRow)
    stmt = ins.on_conflict_do_update(
        index_elements=["session_id", "scope", "key"],
        set_={
            k: getattr(ins.excluded, k)
            for k in ("samples", "gpu_idle_ratio", "detail", "computed_at")
        },
    )
    conn.execute(stmt, list(rows))
