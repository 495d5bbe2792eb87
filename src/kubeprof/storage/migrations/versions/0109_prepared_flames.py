"""prepared_flames: a final session's whole-session flame graphs, stored beside its views

Revision ID: prepared_flames
Revises: prepared_views

One row per (session, view and flags) holding the web UI's answer for the flame graph of
the whole session (no time range, pod or GPU), read back under the same fingerprint and
seal rules as `prepared_views` (`kubeprof.storage.prepared_flames`): a few kB where the
view it comes from is megabytes. A deleted session's rows go with it.
"""

import sqlalchemy as sa
from alembic import op

revision = "prepared_flames"
down_revision = "prepared_views"  # branch_labels, depends_on: none (alembic defaults)


def upgrade() -> None:
    # the columns of prepared_views, spelled out: a migration stays as it was written
    op.create_table(
        "prepared_flames",
        sa.Column(
            "session_id",
            sa.Integer(),
            sa.ForeignKey(
                "sessions.id",
                name=op.f("fk_prepared_flames_session_id_sessions"),
                ondelete="CASCADE",
            ),
            nullable=False,
        ),
        sa.Column("options", sa.String(length=64), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("seal", sa.String(length=64), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("stored_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "options", name=op.f("pk_prepared_flames")),
    )


def downgrade() -> None:
    op.drop_table("prepared_flames")
