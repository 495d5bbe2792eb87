"""Bulk row writes: COPY on PostgreSQL (through psycopg 3), executemany elsewhere."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import psycopg
from sqlalchemy import exc as sa_exc
from sqlalchemy import insert
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.orm import DeclarativeBase

UpsertInsert = postgresql.Insert | sqlite.Insert


def dialect_insert(conn: Connection, table: type[DeclarativeBase]) -> UpsertInsert:
    """An INSERT that supports ON CONFLICT (the two databases kubeprof runs on)."""
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    if conn.dialect.name == "sqlite":
        return sqlite.insert(table)
    raise ValueError(f"unsupported database dialect {conn.dialect.name!r}")


def copies(conn: Connection) -> bool:
    """Whether `conn` can COPY (PostgreSQL through psycopg 3)."""
    return conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg"


def insert_rows(conn: Connection, table: type[DeclarativeBase], rows: Sequence[dict]) -> None:
    """Insert many rows of `table`; all dicts must have the same keys."""
    if not rows:
        return
    if copies(conn):
        copy_rows(conn, table.__tablename__, list(rows[0]), rows)
    else:
        conn.execute(insert(table), list(rows))


def copy_rows(conn: Connection, tablename: str, columns: list[str], rows: Sequence[dict]) -> None:
    """COPY `rows` (dicts with at least `columns`) into `tablename` (PostgreSQL, psycopg)."""
    copy_tuples(conn, tablename, columns, ([row[c] for c in columns] for row in rows))


def copy_tuples(
    conn: Connection, tablename: str, columns: Sequence[str], rows: Iterable[Sequence[object]]
) -> None:
    """COPY `rows` (values in `columns` order) into `tablename` (PostgreSQL, psycopg).
    Table and column names come from our own models, never from input; values travel as
    COPY data."""
    cols = ", ".join(f'"{c}"' for c in columns)
    raw = conn.connection.driver_connection
    assert raw is not None, "a live psycopg connection is needed for COPY"
    sql = f'COPY "{tablename}" ({cols}) FROM STDIN'
    with as_sqlalchemy_errors(conn, sql), raw.cursor() as cur, cur.copy(sql) as copy:
        for row in rows:
            copy.write_row(row)


@contextmanager
def as_sqlalchemy_errors(conn: Connection, sql: str) -> Iterator[None]:
    """psycopg's own errors (from statements sent past SQLAlchemy: COPY, pipelines) as
    SQLAlchemy's, as its own statements raise them: the ingest tells a value the database
    refuses (IntegrityError, DataError: 422) from the rest (503, sent again). A lost
    connection is invalidated, so the rollback after it raises nothing more and the pool
    hands out a new one."""
    try:
        yield
    except psycopg.Error as exc:
        # the dialect's DBAPI error type is a protocol that psycopg's errors are, untyped
        lost = conn.dialect.is_disconnect(cast(Any, exc), conn.connection.dbapi_connection, None)
        if lost:
            conn.invalidate(exc)
        raise sa_exc.DBAPIError.instance(
            sql, None, exc, psycopg.Error, connection_invalidated=lost, dialect=conn.dialect
        ) from exc
