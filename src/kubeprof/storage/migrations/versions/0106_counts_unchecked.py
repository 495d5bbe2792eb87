"""counts_unchecked: stack_counts rows are not checked against sessions and stacks per row

Revision ID: counts_unchecked
Revises: launch_time

Every stack_counts row is written from a batch's sample rows, in their transaction, and
those are checked (their session and stack exist). The same checks on each count row, two
foreign-key triggers per row on PostgreSQL, were over a third of adding a batch's counts
(bench/operator_ingest.py, BENCHMARKS.md). What the session's key also did stays: a
trigger deletes a deleted session's counts, whichever kubeprof version deletes it; the
shared-rows GC lists stack_counts.stack_id among the stack references by hand.
"""

from alembic import op

revision = "counts_unchecked"
down_revision = "launch_time"
branch_labels = None
depends_on = None

# (name, columns, referred table, ON DELETE) of the keys this revision drops
_FKS: tuple[tuple[str, list[str], str, str | None], ...] = (
    ("fk_stack_counts_session_id_sessions", ["session_id"], "sessions", "CASCADE"),
    ("fk_stack_counts_stack_id_stacks", ["stack_id"], "stacks", None),
)
_TRIGGER = "stack_counts_follow_sessions"
_PG_UP = (
    f"CREATE FUNCTION {_TRIGGER}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "DELETE FROM stack_counts WHERE session_id IN (SELECT id FROM gone); RETURN NULL; END $$",
    f"CREATE TRIGGER {_TRIGGER} AFTER DELETE ON sessions REFERENCING OLD TABLE AS gone "
    f"FOR EACH STATEMENT EXECUTE FUNCTION {_TRIGGER}()",
)
_PG_DOWN = (
    f"DROP TRIGGER IF EXISTS {_TRIGGER} ON sessions",
    f"DROP FUNCTION IF EXISTS {_TRIGGER}()",
)
_SQLITE_UP = (
    f"CREATE TRIGGER {_TRIGGER} AFTER DELETE ON sessions FOR EACH ROW BEGIN "
    "DELETE FROM stack_counts WHERE session_id = OLD.id; END",
)
_SQLITE_DOWN = (f"DROP TRIGGER IF EXISTS {_TRIGGER}",)


def _postgres() -> bool:
    return bool(op.get_bind().dialect.name == "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("stack_counts", schema=None) as batch_op:
        for name, *_ in _FKS:
            batch_op.drop_constraint(name, type_="foreignkey")
    for sql in _PG_UP if _postgres() else _SQLITE_UP:
        op.execute(sql)


def downgrade() -> None:
    for sql in _PG_DOWN if _postgres() else _SQLITE_DOWN:
        op.execute(sql)
    # Rows the keys would refuse (none, unless written by hand) go before the keys return.
    op.execute(
        "DELETE FROM stack_counts WHERE session_id NOT IN (SELECT id FROM sessions) "
        "OR stack_id NOT IN (SELECT id FROM stacks)"
    )
    with op.batch_alter_table("stack_counts", schema=None) as batch_op:
        for name, cols, table, ondelete in _FKS:
            batch_op.create_foreign_key(name, table, cols, ["id"], ondelete=ondelete)
