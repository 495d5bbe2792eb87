"""stack_counts: CPU samples pre-counted per (thread, stack), per session and per 1 s bucket

Revision ID: ui_stack_counts
Revises: 0002

Existing sessions are counted from their sample rows on upgrade (one INSERT .. SELECT), so
flame graphs of sessions recorded before it read the same numbers as new ones.
"""

import sqlalchemy as sa
from alembic import op

revision = "ui_stack_counts"
down_revision = "0002"
branch_labels = None
depends_on = None

BUCKET_NS = 1_000_000_000  # kubeprof.storage.stack_counts.BUCKET_NS at this revision


def upgrade() -> None:
    op.create_table(
        "stack_counts",
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.BigInteger(), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("tid", sa.Integer(), nullable=False),
        sa.Column("stack_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("thread", sa.Text(), nullable=False),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_stack_counts_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["stack_id"], ["stacks.id"], name=op.f("fk_stack_counts_stack_id_stacks")
        ),
        sa.PrimaryKeyConstraint(
            "session_id", "bucket", "node", "pid", "tid", "stack_id", name=op.f("pk_stack_counts")
        ),
    )
    # ts_ns / BUCKET_NS: integer division on both databases (bigint / bigint).
    for bucket, group in (("-1", ""), (f"ts_ns / {BUCKET_NS}", f", ts_ns / {BUCKET_NS}")):
        op.execute(
            "INSERT INTO stack_counts (session_id, bucket, node, pid, tid, stack_id, thread, "
            f"samples) SELECT session_id, {bucket}, node, pid, tid, stack_id, MAX(thread), "
            f"COUNT(*) FROM samples GROUP BY session_id{group}, node, pid, tid, stack_id"
        )


def downgrade() -> None:
    op.drop_table("stack_counts")
