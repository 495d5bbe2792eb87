"""launch_time: when and on which thread each GPU record's launching API call was made

Revision ID: launch_time
Revises: batch_interned

`launch_ns` (host CLOCK_MONOTONIC, as CPU samples) and `launch_tid` (the host's thread id)
come from the tracer's launch rows since GPU wire version 2; 0 where they were not recorded,
which is every row stored before this revision.
"""

import sqlalchemy as sa
from alembic import op

revision = "launch_time"
down_revision = "batch_interned"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gpu_activities", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("launch_ns", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("launch_tid", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("gpu_activities", schema=None) as batch_op:
        batch_op.drop_column("launch_tid")
        batch_op.drop_column("launch_ns")
