"""counts_later: stack_counts are counted after the batch, behind a per-session watermark

Revision ID: counts_later
Revises: counts_unchecked

A batch's transaction writes only its sample rows; `kubeprof.storage.compaction` adds the
samples past `sessions.counted_sample_id` to stack_counts and raises that watermark in one
transaction, and readers add the samples past it themselves. Every sample stored before
this revision was counted in its batch's transaction: the watermark starts at the highest
sample id.
"""

import sqlalchemy as sa
from alembic import op

revision = "counts_later"
down_revision = "counts_unchecked"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ALTER TABLE, also on SQLite: a batch copy of `sessions` would drop the table its
    # rows' ON DELETE CASCADE and the stack_counts trigger follow.
    op.add_column(
        "sessions",
        sa.Column("counted_sample_id", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.execute("UPDATE sessions SET counted_sample_id = (SELECT COALESCE(MAX(id), 0) FROM samples)")


def downgrade() -> None:
    # The schema before counted every sample in its batch: count what is not counted yet.
    from kubeprof.storage import compaction

    compaction.count_all(op.get_bind())
    op.execute("ALTER TABLE sessions DROP COLUMN counted_sample_id")
