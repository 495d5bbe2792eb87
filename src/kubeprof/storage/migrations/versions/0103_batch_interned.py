"""batch_interned: the frames and stacks each stored batch added to the shared tables

Revision ID: batch_interned
Revises: shared_gc

A session's quota on the shared frame and stack tables (the operator's
`--ingest-max-session-frames/-stacks`) counts the rows its batches added; kept beside each
batch's record count so an operator restarted mid-session knows them again.
"""

import sqlalchemy as sa
from alembic import op

revision = "batch_interned"
down_revision = "shared_gc"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ingested_batches", schema=None) as batch_op:
        batch_op.add_column(sa.Column("frames", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("stacks", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("ingested_batches", schema=None) as batch_op:
        batch_op.drop_column("stacks")
        batch_op.drop_column("frames")
