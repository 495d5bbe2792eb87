"""Migrations: one head, and upgrade/downgrade work with data present."""

from __future__ import annotations

from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text

from kubeprof.storage import migrate


def test_single_head():
    heads = ScriptDirectory.from_config(migrate.alembic_config()).get_heads()
    assert len(heads) == 1


def test_upgrade_downgrade_upgrade_with_data(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path}/m.db")
    with engine.begin() as conn:
        migrate.upgrade(conn)
        conn.execute(
            text(
                "INSERT INTO sessions (name, kind, command, hz, host, status, "
                "started_at, start_ns, end_ns, meta) VALUES ('a', 'local', '', 99, "
                "'', 'running', CURRENT_TIMESTAMP, 0, 0, '{}')"
            )
        )
    with engine.begin() as conn:
        migrate.downgrade(conn, "base")
        assert "sessions" not in inspect(conn).get_table_names()
    with engine.begin() as conn:
        migrate.upgrade(conn)
        tables = set(inspect(conn).get_table_names())
    assert {
        "sessions",
        "frames",
        "stacks",
        "samples",
        "gpu_activities",
        "gpu_metrics",
        "counters",
        "ingested_batches",
        "processes",
    } <= tables
