"""shared_gc: what garbage collection of the interned stacks and frames needs

Revision ID: shared_gc
Revises: offcpu_samples

`intern_epochs` holds one counter, raised by every collection that deleted rows, so each
Interner knows its cached ids may be gone; one index per stack-id column, so "is this stack
still used" (and PostgreSQL's foreign-key check on each deleted stack) is a lookup, not a
scan of the samples.
"""

import sqlalchemy as sa
from alembic import op

revision = "shared_gc"
down_revision = "offcpu_samples"
branch_labels = None
depends_on = None

# (table, index): every column that refers to stacks.id at this revision.
STACK_ID_INDEXES = (
    ("samples", "ix_samples_stack_id"),
    ("gpu_activities", "ix_gpu_activities_stack_id"),
    ("stack_counts", "ix_stack_counts_stack_id"),
    ("offcpu_samples", "ix_offcpu_samples_stack_id"),
)


def upgrade() -> None:
    epochs = op.create_table(
        "intern_epochs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_intern_epochs")),
    )
    op.bulk_insert(epochs, [{"id": 1, "epoch": 0}])
    for table, index in STACK_ID_INDEXES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.create_index(index, ["stack_id"], unique=False)


def downgrade() -> None:
    for table, index in STACK_ID_INDEXES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(index)
    op.drop_table("intern_epochs")
