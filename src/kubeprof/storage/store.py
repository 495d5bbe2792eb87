"""The store: open a database at the current schema, write batches, close cleanly."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Unpack

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DatabaseError, SQLAlchemyError
from sqlalchemy.sql.elements import TextClause

from kubeprof.model import Batch
from kubeprof.storage import compaction, cpu_samples, intern, migrate, models, offcpu, sessions
from kubeprof.storage.batch_tx import BatchTx, upsert_sql
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
        with self.engine.connect() as conn, conn.begin() as tx:
            bt = BatchTx(conn)
            rows = write_batch(conn, self.interner, session_id, batch, node=node, bt=bt)
            bt.commit(tx)
            return rows


@dataclass(frozen=True, slots=True)
class Held:
    """The locks a batch's transaction took up front (`hold`)."""

    epoch: int | None  # the interning epoch, read under the interning lock (None: not taken)
    writing: bool  # the session's sample-writers lock (`compaction.hold_writing`)


def hold(
    bt: BatchTx,
    session_id: int,
    batch: Batch,
    first: Sequence[tuple[TextClause, Mapping[str, Any]]] = (),
) -> tuple[list[Any], Held]:
    """Run `first` (the ingest's idempotency row), then take the locks `batch` needs, in
    one round trip on PostgreSQL: the first rows of `first`'s statements and what is held.
    Both locks are shared and taken in this order by every writer; a compaction or a
    collection that waits for them holds nothing a writer waits for."""
    interning = bool(batch.samples or batch.offcpu_samples) or any(
        a.stack for a in batch.gpu_activities
    )
    stmts = list(first)
    if interning:
        stmts += intern.interning_statements(bt.conn)
    epoch_at = len(stmts) - 1
    if batch.samples:
        stmts += compaction.writing_statements(bt.conn, session_id)
    rows = bt.together(stmts)
    epoch = rows[epoch_at] if interning else None
    held = Held(
        int((epoch[0] if epoch else 0) or 0) if interning else None,
        bool(batch.samples),
    )
    return rows[: len(first)], held


def write_batch(
    conn: Connection,
    interner: Interner,
    session_id: int,
    batch: Batch,
    *,
    node: str = "",
    bt: BatchTx | None = None,
    held: Held | None = None,
) -> int:
    """Write `batch` on an open transaction (the ingest API adds its idempotency row to
    it). With `bt` its small statements are left queued on it for the caller's commit,
    and `held` says which locks `hold` took; without, they run before this returns."""
    own = bt is None
    bt = bt if bt is not None else BatchTx(conn)
    if held is None:
        held = hold(bt, session_id, batch)[1]
    # A decoded batch's samples share one tuple per distinct stack: hash each tuple once
    # (hashing a 24-frame stack calls Python once per frame: per sample, or twice per
    # distinct stack, it was a tenth of ingest; `Interner.hash_of` finds a stack decoded
    # before by identity), the batch holding the tuples alive while their ids key these.
    distinct = {id(s.stack): s.stack for s in batch.samples}
    distinct.update((id(a.stack), a.stack) for a in batch.gpu_activities if a.stack)
    hashes = {k: interner.hash_of(stack) for k, stack in distinct.items()}
    by_hash = {h: distinct[k] for k, h in hashes.items()}
    ids = interner.hashed_ids_for(conn, by_hash, epoch=held.epoch) if by_hash else {}
    sid = {k: ids[h] for k, h in hashes.items()}
    samples: list[cpu_samples.SampleTuple] = [
        (session_id, node, s.ts_ns, s.pid, s.tid, s.cpu, s.thread, sid[id(s.stack)])
        for s in batch.samples
    ]
    cpu_samples.write(conn, samples, held=held.writing)
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
    waits = offcpu.write(conn, interner, session_id, node, batch.offcpu_samples, epoch=held.epoch)
    bt.later(_PROCESSES, _process_rows(session_id, node, batch))
    bt.later(_COUNTERS, _counter_rows(session_id, node, batch.counters))
    bt.later(_TRACERS, _tracer_rows(session_id, node, batch))
    if own:
        bt.flush()
    return (
        len(samples)
        + len(activities)
        + len(metrics)
        + len(batch.processes)
        + len(batch.gpu_tracers)
        + waits
    )


_PROCESS_UPDATED = ("ppid", "name", "cmdline", "container_id", "pod_uid")
_PROCESSES = upsert_sql(
    models.ProcessRow.__tablename__,
    ("session_id", "node", "pid", *_PROCESS_UPDATED),
    ("session_id", "node", "pid"),
    {k: f"excluded.{k}" for k in _PROCESS_UPDATED},
)
_COUNTERS = upsert_sql(
    models.CounterRow.__tablename__,
    ("session_id", "node", "name", "value"),
    ("session_id", "node", "name"),
    {"value": f"{models.CounterRow.__tablename__}.value + excluded.value"},
)
_TRACER_UPDATED = ("pid", "state", "reason")
_TRACERS = upsert_sql(
    models.GpuTracerRow.__tablename__,
    ("session_id", "node", "pod_uid", "socket", *_TRACER_UPDATED),
    ("session_id", "node", "pod_uid", "socket"),
    {k: f"excluded.{k}" for k in _TRACER_UPDATED},
)


def _tracer_rows(session_id: int, node: str, batch: Batch) -> list[dict[str, Any]]:
    """The latest answer per (pod, control socket) wins: the agent re-sends on change."""
    rows = {
        (t.pod_uid, t.socket): {
            "session_id": session_id,
            "node": node,
            "pod_uid": t.pod_uid,
            "socket": t.socket,
            **{k: getattr(t, k) for k in _TRACER_UPDATED},
        }
        for t in batch.gpu_tracers
    }
    return list(rows.values())


def _process_rows(session_id: int, node: str, batch: Batch) -> list[dict[str, Any]]:
    """One row per pid (its last record in the batch); a stored row takes its values."""
    rows = {
        p.pid: {"session_id": session_id, "node": node, "pid": p.pid}
        | {k: getattr(p, k) for k in _PROCESS_UPDATED}
        for p in batch.processes
    }
    return list(rows.values())


def _counter_rows(session_id: int, node: str, counters: Mapping[str, int]) -> list[dict[str, Any]]:
    """Counter increments, added to the stored values."""
    return [
        {"session_id": session_id, "node": node, "name": k, "value": int(v)}
        for k, v in counters.items()
    ]


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
