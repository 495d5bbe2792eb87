"""A PostgreSQL for one bench run: the URL given, else a throw-away PostgreSQL 15 started
with the e2e harness (fsync off), stopped and removed when the run is done."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def database(dsn: str | None = None) -> Iterator[str]:
    """The SQLAlchemy URL of `dsn`, or of a PostgreSQL started for the block."""
    if dsn:
        yield dsn
        return
    sys.path.insert(0, str(ROOT))
    from tests.e2e.cluster import Postgres

    tmp = Path(tempfile.mkdtemp(prefix="kubeprof-bench-pg-"))
    tmp.chmod(0o711)
    pg = Postgres(tmp / "pg").start()
    try:
        yield pg.url
    finally:
        pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """A bench's argument parser, its usage from `doc`, with --dsn (for `database`)."""
    p = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--dsn", help="SQLAlchemy URL of an existing, empty PostgreSQL database")
    return p
