"""One PostgreSQL server shared by every pytest process of a run (xdist workers, a child pytest).

The main pytest process names a folder in ``KUBEPROF_E2E_PG_DIR`` before any worker starts;
the first process that needs a server starts it there under a file lock, the others find it
running. The process that named the folder stops the server (by the PID in its data folder)
when the run ends. Each test module then gets a database of its own on it.
"""

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .postgres import Postgres

ENV = "KUBEPROF_E2E_PG_DIR"
OWNER_ENV = "KUBEPROF_E2E_PG_OWNER"  # the PID of the process that named the folder


def name_folder() -> Path:
    """A new, empty folder for the run's server, traversable by the postgres user (0711)."""
    parent = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-pg-"))
    parent.chmod(0o711)
    return parent / "pg"


@contextlib.contextmanager
def _locked(pg_dir: Path) -> Iterator[None]:
    pg_dir.parent.mkdir(parents=True, exist_ok=True)
    with (pg_dir.parent / f"{pg_dir.name}.lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def acquire(pg_dir: Path) -> Postgres:
    """The server in pg_dir, started by this call when no other process has started it;
    the call that starts it also starts a watchdog that stops it if the folder's owner is
    killed before `release` (the server would outlive the run)."""
    with _locked(pg_dir):
        pg = Postgres(pg_dir)
        if pg.is_running():
            return pg
        pg.start()
        owner = os.environ.get(OWNER_ENV, "")
        if owner.isdigit():
            from .watchdog import watch

            watch(owner=int(owner), postgres=pg_dir)
        return pg


def release(pg_dir: Path) -> str:
    """Stop the server (if one was started) and remove its folder; says what it did.

    KUBEPROF_E2E_KEEP=1 keeps the folder (data and log) for a look after the run.
    """
    pg = Postgres(pg_dir)
    with _locked(pg_dir):
        stopped = pg.stop()
    if not (pg_dir / "data").exists():  # no process needed a server
        shutil.rmtree(pg_dir.parent, ignore_errors=True)
        return ""
    if os.environ.get("KUBEPROF_E2E_KEEP"):
        return f"kept {pg_dir.parent} (PostgreSQL data and log)"
    shutil.rmtree(pg_dir.parent, ignore_errors=True)
    return "stopped the shared PostgreSQL" if stopped else ""


def database_name(module: str, salt: str) -> str:
    """A PostgreSQL database name for a test module: lower case, at most 63 characters."""
    stem = "".join(c if c.isalnum() else "_" for c in module.rsplit(".", 1)[-1].lower())
    return f"kp_{stem[:48]}_{salt[:8]}"
