"""gpu_tracers: what each injected GPU tracer answered a session's node agent

Revision ID: inject3_gpu_tracers
Revises: ui_stack_counts

One row per (session, node, pod, control socket), the latest answer: on, off (was on) or
refused with the tracer's reason; the session's status counts them per pod.
"""

import sqlalchemy as sa
from alembic import op

revision = "inject3_gpu_tracers"
down_revision = "ui_stack_counts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_tracers",
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("pod_uid", sa.String(length=64), nullable=False),
        sa.Column("socket", sa.String(length=128), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_gpu_tracers_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "session_id", "node", "pod_uid", "socket", name=op.f("pk_gpu_tracers")
        ),
    )


def downgrade() -> None:
    op.drop_table("gpu_tracers")
