"""Puts the repository root on sys.path, so tests import shared helpers as `tests.support`,
and sets up what several pytest processes of one run share (`make test` runs xdist workers):

- the tests that must not overlap (eBPF, the one control plane, machine-wide state) go to a
  single xdist worker, in collection order: marker `serial`, also given to every test marked
  `bpf` or using the control plane; the rest run on the other workers;
- one PostgreSQL server for the whole run (tests/e2e/cluster/shared.py), stopped here at the end.
"""

import os
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from tests.e2e.cluster import shared  # noqa: E402

# Fixtures whose users share machine-wide state: the run's control plane, and eBPF.
SERIAL_FIXTURES = frozenset({"k8s_cluster", "k8s_client", "bpf_ready"})
SERIAL_GROUP = "serial"
_OWNED_PG = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """Name the run's PostgreSQL folder once, in the main process, before workers start."""
    config.addinivalue_line(
        "markers",
        "serial: uses machine-wide state (eBPF, the control plane, fixed ports, file modes); "
        "runs on one xdist worker, never beside another serial test",
    )
    if hasattr(config, "workerinput") or os.environ.get(shared.ENV):
        return  # an xdist worker, or a child pytest of a run: the folder is named already
    pg_dir = shared.name_folder()
    os.environ[shared.ENV] = str(pg_dir)
    config.stash[_OWNED_PG] = pg_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the run's PostgreSQL, after every worker has finished."""
    pg_dir = config.stash.get(_OWNED_PG, None)
    if pg_dir is None:
        return
    os.environ.pop(shared.ENV, None)
    said = shared.release(pg_dir)
    if said:
        print(f"\nkubeprof e2e: {said}", file=sys.stderr)


def is_serial(item: pytest.Item) -> bool:
    """True for a test that must not run beside another serial one."""
    if item.get_closest_marker("serial") or item.get_closest_marker("bpf"):
        return True
    return bool(SERIAL_FIXTURES & set(getattr(item, "fixturenames", ())))


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Serial tests into one xdist group; a module using a database keeps to one worker."""
    for item in items:
        if is_serial(item):
            item.add_marker(pytest.mark.serial)
            item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP))
        elif "postgres_dsn" in getattr(item, "fixturenames", ()):
            # Its module-scoped database and fixtures are set up once, on one worker.
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
