"""Migrations: one head, and upgrade/downgrade work with data present."""

from __future__ import annotations

import re
from pathlib import Path

from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text

from kubeprof.storage import migrate


def test_single_head():
    heads = ScriptDirectory.from_config(migrate.alembic_config()).get_heads()
    assert len(heads) == 1


# Revision ids applied before the naming rule: existing stores are stamped with them, and an
# older kubeprof sharing such a database knows only them, so they are kept, not renamed.
NUMBERED_BEFORE_THE_RULE = {"0001": "initial_schema", "0002": "session_aggregates"}


def test_revision_ids_are_the_file_names_words_in_chain_order():
    """The rule for every new migration: file ``NNNN_<id>.py`` (NNNN the next number) and
    revision id ``<id>``, lower-case words with underscores (as ``shared_gc``)."""
    script = ScriptDirectory.from_config(migrate.alembic_config())
    numbers = []
    for rev in reversed(list(script.walk_revisions())):  # from the first migration on
        name = Path(rev.path).name
        m = re.fullmatch(r"(\d{4})_([a-z][a-z0-9_]*)\.py", name)
        assert m, f"{name}: name a migration NNNN_<revision id>.py"
        number, words = m.groups()
        if rev.revision in NUMBERED_BEFORE_THE_RULE:
            assert words == NUMBERED_BEFORE_THE_RULE[rev.revision], name
        else:
            assert rev.revision == words, (
                f"{name}: revision = {words!r} (the file name after its number), "
                f"not {rev.revision!r}"
            )
        numbers.append(int(number))
    assert numbers == sorted(set(numbers)), (
        f"file numbers must rise along the revision chain, each used once: {numbers}"
    )


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


def test_gpu_rows_stored_before_launch_times_read_as_not_recorded(tmp_path):
    """launch_time adds launch_ns/launch_tid to gpu_activities: rows already there get 0
    (not recorded), and going back down keeps the rows."""
    engine = create_engine(f"sqlite:///{tmp_path}/m.db")
    columns = (
        "session_id, node, kind, name, demangled, start_ns, end_ns, device, pid, "
        "correlation_id, stream, grid_x, grid_y, grid_z, block_x, block_y, block_z, "
        "registers, shared_mem, bytes"
    )
    with engine.begin() as conn:
        migrate.upgrade(conn, "batch_interned")
        conn.execute(
            text(
                "INSERT INTO sessions (id, name, kind, command, hz, host, status, "
                "started_at, start_ns, end_ns, meta) VALUES (1, 'a', 'local', '', 99, "
                "'', 'running', CURRENT_TIMESTAMP, 0, 0, '{}')"
            )
        )
        conn.execute(
            text(
                f"INSERT INTO gpu_activities ({columns}) VALUES "
                "(1, '', 'kernel', 'k', '', 10, 20, 0, 7, 3, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0)"
            )
        )
    with engine.begin() as conn:
        migrate.upgrade(conn)
        rows = conn.execute(text("SELECT launch_ns, launch_tid FROM gpu_activities")).all()
        assert [tuple(r) for r in rows] == [(0, 0)]
    with engine.begin() as conn:
        migrate.downgrade(conn, "batch_interned")
        assert "launch_ns" not in {c["name"] for c in inspect(conn).get_columns("gpu_activities")}
        assert conn.execute(text("SELECT count(*) FROM gpu_activities")).scalar() == 1
