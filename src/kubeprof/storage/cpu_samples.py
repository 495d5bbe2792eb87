"""One batch's CPU sample rows and their `stack_counts`, written together.

On PostgreSQL the rows travel once, COPYed into a per-connection temporary table; the
`samples` rows and the counts are then both made from it by the server. Before, the
counts were made in Python and sent as a second COPY of about two rows per sample; that
and the sample rows' own COPY were two thirds of the ingest's Python time.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import insert
from sqlalchemy.engine import Connection

from kubeprof.storage import stack_counts
from kubeprof.storage.bulk import copies, copy_tuples
from kubeprof.storage.models import SampleRow

COLUMNS = ("session_id", "node", "ts_ns", "pid", "tid", "cpu", "thread", "stack_id")
# (session_id, node, ts_ns, pid, tid, cpu, thread, stack_id): one session and node a call
SampleTuple = tuple[int, str, int, int, int, int, str, int]

_STAGE = "samples_in"  # the temporary table (our name; its rows go at commit)


def write(conn: Connection, rows: Sequence[SampleTuple]) -> None:
    """Store `rows` (one batch: one session and node) and add them to `stack_counts`."""
    if not rows:
        return
    if copies(conn):
        _write_staged(conn, rows)
        return
    conn.execute(insert(SampleRow), [dict(zip(COLUMNS, r, strict=True)) for r in rows])
    session_id, node = rows[0][0], rows[0][1]
    stack_counts.add_counts(
        conn,
        stack_counts.count_rows(session_id, node, ((r[2], r[3], r[4], r[6], r[7]) for r in rows)),
    )


def _write_staged(conn: Connection, rows: Sequence[SampleTuple]) -> None:
    cols = ", ".join(COLUMNS)
    # Created in the batch's transaction: one that rolls back takes the table with it and
    # the next batch creates it again.
    conn.exec_driver_sql(
        f"CREATE TEMP TABLE IF NOT EXISTS {_STAGE} ON COMMIT DELETE ROWS AS "
        f"SELECT {cols} FROM {SampleRow.__tablename__} WITH NO DATA"
    )
    copy_tuples(conn, _STAGE, COLUMNS, rows)
    conn.exec_driver_sql(
        f"INSERT INTO {SampleRow.__tablename__} ({cols}) SELECT {cols} FROM {_STAGE}"
    )
    threads = {(r[3], r[4]): r[6] for r in rows}
    stack_counts.add_staged(conn, _STAGE, rows[0][0], rows[0][1], threads)
