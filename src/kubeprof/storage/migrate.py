"""Run Alembic migrations programmatically, so every store opens at the current schema."""

from __future__ import annotations

import threading
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection

SCRIPT_LOCATION = str(Path(__file__).with_name("migrations"))
# Alembic loads migration scripts as modules: not safe from two threads at once.
_LOCK = threading.Lock()
# Any constant works; it only has to be the same for every kubeprof process on one database.
_PG_ADVISORY_KEY = 0x6B7562_6570_726F66 & 0x7FFFFFFFFFFFFFFF


def alembic_config(connection: Connection | None = None, url: str = "") -> Config:
    """An Alembic config pointing at kubeprof's migration scripts."""
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def is_current(connection: Connection) -> bool:
    """True when the database is already at the newest revision (the common case)."""
    heads = set(ScriptDirectory.from_config(alembic_config()).get_heads())
    return set(MigrationContext.configure(connection).get_current_heads()) == heads


def upgrade(connection: Connection, revision: str = "head") -> None:
    """Upgrade; several processes (operator restarts, agents) may race to do it."""
    with _LOCK:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_ADVISORY_KEY})
        if revision == "head" and is_current(connection):
            return
        command.upgrade(alembic_config(connection), revision)


def downgrade(connection: Connection, revision: str) -> None:
    with _LOCK:
        command.downgrade(alembic_config(connection), revision)
