"""One batch's transaction in few round trips: its small statements sent together.

Around a batch's COPY of samples sit a handful of small statements: the ingest's
idempotency row, the interning lock and epoch, the session's sample-writers lock, the
process upsert, the row counts, BEGIN and COMMIT. Sent one by one they were ~9 round trips
of 0.2-0.5 ms each beside a 1,000-sample COPY of ~14 ms, and in the operator each one also
waits for its thread to get the GIL back from the decoding threads. On PostgreSQL
(psycopg 3) they go in pipelines instead: the ones before the COPY in one round trip
(`begin`), the ones after it with the COMMIT in another (`later`, then `commit`). They are
still separate statements in the same order, so each reads its own snapshot (the epoch is
read after its lock is granted) and an error aborts the whole transaction as before.
SQLite runs each statement when it is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import psycopg
from sqlalchemy import text
from sqlalchemy.engine import Connection, Dialect, RootTransaction
from sqlalchemy.sql.elements import TextClause

from kubeprof.storage.bulk import as_sqlalchemy_errors, copies

Params = Mapping[str, Any]


def pipelines(conn: Connection) -> bool:
    """Whether `conn` sends statements in pipelines (PostgreSQL through psycopg 3 and a
    libpq that has pipeline mode)."""
    return copies(conn) and psycopg.Pipeline.is_supported()


@lru_cache(maxsize=64)
def _pg_sql(stmt: TextClause, dialect: Dialect) -> str:
    """`stmt` as psycopg's SQL (`:name` -> `%(name)s`), compiled once per statement."""
    return str(stmt.compile(dialect=dialect))


class BatchTx:
    """The small statements of one batch's transaction on `conn`."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.pipelined = pipelines(conn)
        self._later: list[tuple[TextClause, Sequence[Params]]] = []

    def together(self, stmts: Sequence[tuple[TextClause, Params]]) -> list[Any]:
        """Run `stmts` in order, in one round trip on PostgreSQL; each one's first row
        (None when it returned none)."""
        if not self.pipelined:
            results = (self.conn.execute(s, dict(p)) for s, p in stmts)
            return [r.first() if r.returns_rows else None for r in results]
        raw = self.conn.connection.driver_connection
        assert isinstance(raw, psycopg.Connection)
        with as_sqlalchemy_errors(self.conn, "; ".join(s.text for s, _ in stmts)):
            cursors = [raw.cursor() for _ in stmts]
            try:
                with raw.pipeline():
                    for cur, (stmt, params) in zip(cursors, stmts, strict=True):
                        cur.execute(_pg_sql(stmt, self.conn.dialect), params)
                return [cur.fetchone() if cur.description else None for cur in cursors]
            finally:
                for cur in cursors:
                    cur.close()

    def later(self, stmt: TextClause, rows: Sequence[Params]) -> None:
        """Run `stmt` once per row of `rows` before the commit (its results unread); on
        PostgreSQL sent with the COMMIT."""
        if not rows:
            return
        if self.pipelined:
            self._later.append((stmt, rows))
        else:
            self.conn.execute(stmt, [dict(r) for r in rows])

    def flush(self) -> None:
        """Run the statements queued by `later` now (one round trip)."""
        self._send(None)

    def commit(self, tx: RootTransaction) -> None:
        """Run the queued statements and commit `tx`, in one round trip on PostgreSQL."""
        self._send(tx)

    def _send(self, tx: RootTransaction | None) -> None:
        todo, self._later = self._later, []
        if not todo:
            if tx is not None:
                tx.commit()
            return
        raw = self.conn.connection.driver_connection
        assert isinstance(raw, psycopg.Connection)
        with (
            as_sqlalchemy_errors(self.conn, "; ".join(s.text for s, _ in todo)),
            raw.pipeline(),
            raw.cursor() as cur,
        ):
            for stmt, rows in todo:
                cur.executemany(_pg_sql(stmt, self.conn.dialect), rows)
            if tx is not None:
                # In the pipeline, not by psycopg's commit(), which would sync once more
                # before the pipeline's own sync. A statement that failed makes the server
                # skip it: the transaction stays open, aborted, for the rollback.
                cur.execute(b"COMMIT")
        if tx is not None:
            tx.commit()  # SQLAlchemy's bookkeeping; psycopg sends nothing for an ended one


def upsert_sql(
    table: str, columns: Sequence[str], key: Sequence[str], updated: Mapping[str, str]
) -> TextClause:
    """INSERT of `columns` (bound by name) ON CONFLICT (`key`) DO UPDATE SET column =
    expression, for both databases. Names come from our own models, never from input."""
    return text(
        f"INSERT INTO {table} ({', '.join(columns)}) "
        f"VALUES ({', '.join(':' + c for c in columns)}) "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET "
        + ", ".join(f"{c} = {e}" for c, e in updated.items())
    )
