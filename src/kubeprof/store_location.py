"""Where the store lives and whether an SQLite path can hold it, without opening it.

Apart from `kubeprof.storage` because importing that package imports SQLAlchemy and
Alembic (~0.4 s): `kubeprof record` checks the path before it starts the command, then
opens the store on a thread while the command runs.
"""

from __future__ import annotations

import os
from pathlib import Path

FIX = "pass --store sqlite:////a/writable/path.db or set KUBEPROF_STORE"


def default_url() -> str:
    """The embedded default: `$KUBEPROF_STORE`, else an SQLite file in the XDG data dir."""
    if env := os.environ.get("KUBEPROF_STORE"):
        return env
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return f"sqlite:///{base / 'kubeprof' / 'kubeprof.db'}"


def prepare_sqlite_path(url: str) -> str:
    """Create an SQLite store's folder; what is wrong with its path ("" when nothing is,
    and for in-memory or other databases)."""
    path = url.split("sqlite:///", 1)[1] if "sqlite:///" in url else ""
    if not path or path == ":memory:":
        return ""
    folder = Path(path).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create the store folder {folder}: {exc.strerror}; {FIX}"
    try:  # a folder this user may not search (/root) refuses even the look
        target = Path(path) if Path(path).exists() else folder
    except OSError as exc:
        return f"cannot read the store {path}: {exc.strerror}; {FIX}"
    if not os.access(target, os.W_OK):
        return f"the store {path} is not writable; {FIX}"
    return ""
