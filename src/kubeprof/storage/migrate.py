"""Run Alembic migrations programmatically, so every store opens at the current schema."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection

SCRIPT_LOCATION = str(Path(__file__).with_name("migrations"))


def alembic_config(connection: Connection | None = None, url: str = "") -> Config:
    """An Alembic config pointing at kubeprof's migration scripts."""
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(connection: Connection, revision: str = "head") -> None:
    command.upgrade(alembic_config(connection), revision)


def downgrade(connection: Connection, revision: str) -> None:
    command.downgrade(alembic_config(connection), revision)
