"""offcpu_samples: spans target threads spent off CPU, with the stack they waited in

Revision ID: offcpu_samples
Revises: inject3_gpu_tracers

One row per kept wait (the BPF sched_switch probe) or per idle-thread sample (py-spy
--idle); `weight_ns` is the wall time it stands for in the off-CPU and wall views.
"""

import sqlalchemy as sa
from alembic import op

revision = "offcpu_samples"
down_revision = "inject3_gpu_tracers"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "offcpu_samples",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("ts_ns", sa.BigInteger(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("tid", sa.Integer(), nullable=False),
        sa.Column("thread", sa.Text(), nullable=False),
        sa.Column("blocked_ns", sa.BigInteger(), nullable=False),
        sa.Column("weight_ns", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("stack_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_offcpu_samples_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["stack_id"], ["stacks.id"], name=op.f("fk_offcpu_samples_stack_id_stacks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_offcpu_samples")),
    )
    with op.batch_alter_table("offcpu_samples", schema=None) as batch_op:
        batch_op.create_index(
            "ix_offcpu_samples_session_stack", ["session_id", "stack_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("offcpu_samples", schema=None) as batch_op:
        batch_op.drop_index("ix_offcpu_samples_session_stack")
    op.drop_table("offcpu_samples")
