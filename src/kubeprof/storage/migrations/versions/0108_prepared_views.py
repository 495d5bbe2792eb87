"""prepared_views: a final session's report view, stored once and read back

Revision ID: prepared_views
Revises: counts_later

One row per (session, options) holding the view `reporting.load_report` prepares, read
back while the code fingerprint and the session's seal still match
(`kubeprof.storage.prepared_views`); a deleted session's rows go with it.
"""

import sqlalchemy as sa
from alembic import op

revision = "prepared_views"
down_revision = "counts_later"  # branch_labels, depends_on: none (alembic defaults)


def upgrade() -> None:
    owner = sa.ForeignKey(
        "sessions.id", name=op.f("fk_prepared_views_session_id_sessions"), ondelete="CASCADE"
    )
    key = sa.PrimaryKeyConstraint("session_id", "options", name=op.f("pk_prepared_views"))
    text = {name: sa.String(length=64) for name in ("options", "fingerprint", "seal")}
    op.create_table(
        "prepared_views",
        sa.Column("session_id", sa.Integer(), owner, nullable=False),
        *(sa.Column(name, kind, nullable=False) for name, kind in text.items()),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("stored_at", sa.DateTime(timezone=True), nullable=False),
        key,
    )


def downgrade() -> None:
    op.drop_table("prepared_views")
