"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
"""

import sqlalchemy as sa
from alembic import op

# File NNNN_<id>.py (the next number), revision id <id> in lower-case words: the rule
# tests/unit/storage/test_migrations.py checks (0001 and 0002 keep the ids stores carry).
revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
