"""session aggregates (cluster sessions: per session, node and pod)

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "session_aggregates",
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("scope", sa.String(length=8), nullable=False),
        sa.Column("key", sa.String(length=253), nullable=False),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.Column("gpu_idle_ratio", sa.Float(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_session_aggregates_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "scope", "key", name=op.f("pk_session_aggregates")),
    )


def downgrade() -> None:
    op.drop_table("session_aggregates")
