"""samples_by_session_id: an index on samples (session_id, id)

Revision ID: samples_by_session_id
Revises: prepared_views

Readers add a session's samples past its watermark (`sessions.counted_sample_id`) to its
counted rows. Without this index that range was read through the primary key: every
sample past the watermark, of every session, so one session left uncounted (killed, or
created empty) made each read cost every sample stored after it. Through (session_id, id)
a session's uncounted samples cost only themselves.
"""

from alembic import op

revision = "samples_by_session_id"
down_revision = "prepared_flames"  # branch_labels, depends_on: none (alembic defaults)


def upgrade() -> None:
    op.create_index("ix_samples_session_id_id", "samples", ["session_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_samples_session_id_id", table_name="samples")
