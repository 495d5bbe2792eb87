"""Puts the repository root on sys.path, so tests import shared helpers as `tests.support`,
and sets up what several pytest processes of one run share (`make test` runs xdist workers):

- tests that must not overlap run in order on one xdist worker each: group `serial` for
  machine-wide state (marker `serial`, fixture `bpf_ready`, and tests marked `bpf` that use
  no control plane), and a group `cluster:<module>` for each module of tests of the control
  plane, those whose agents sample with eBPF included (each profiles only its own
  processes). Each worker starts its own control plane when a test asks for one and runs
  one test at a time on it, so two operators (which watch every namespace) never share one;
  modules spread over the workers, the control-plane ones first
  (tests/support/xdist_groups.py);
- one PostgreSQL server for the whole run (tests/e2e/cluster/shared.py), stopped here at the end.
"""

import os
import sys
import tempfile
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from tests.e2e.cluster import shared  # noqa: E402

SERIAL_GROUP = "serial"  # machine-wide state
CLUSTER_GROUP = "cluster"  # the control plane's other tests: "cluster:<module>"
SERIAL_FIXTURES = frozenset({"bpf_ready"})
CLUSTER_FIXTURES = frozenset({"k8s_cluster", "k8s_client"})
_OWNED_PG = pytest.StashKey[Path]()
_GROUPS = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """Name the run's PostgreSQL folder once, in the main process, before workers start."""
    config.addinivalue_line(
        "markers",
        "serial: uses machine-wide state (eBPF, fixed ports, file modes); runs on one xdist "
        "worker, never beside another serial test",
    )
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the main process named the folders
    if config.pluginmanager.hasplugin("xdist"):
        from tests.support import xdist_groups

        prefix = str(Path(tempfile.mkdtemp(prefix="kubeprof-xdist-groups-")) / "groups")
        os.environ[xdist_groups.ENV] = prefix
        config.stash[_GROUPS] = prefix
        config.pluginmanager.register(xdist_groups.Scheduler(prefix), "kubeprof-xdist-groups")
    if os.environ.get(shared.ENV):
        return  # a child pytest of a run: the PostgreSQL folder is named already
    pg_dir = shared.name_folder()
    os.environ[shared.ENV] = str(pg_dir)
    os.environ[shared.OWNER_ENV] = str(os.getpid())
    config.stash[_OWNED_PG] = pg_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the run's PostgreSQL, after every worker has finished."""
    prefix = config.stash.get(_GROUPS, None)
    if prefix is not None:
        from tests.support import xdist_groups

        xdist_groups.remove(prefix)
    pg_dir = config.stash.get(_OWNED_PG, None)
    if pg_dir is None:
        return
    os.environ.pop(shared.ENV, None)
    os.environ.pop(shared.OWNER_ENV, None)
    said = shared.release(pg_dir)
    if said:
        print(f"\nkubeprof e2e: {said}", file=sys.stderr)


def group_of(item: pytest.Item) -> str | None:
    """The xdist group a test runs in (in order, on one worker), or None: anywhere."""
    fixtures = set(getattr(item, "fixturenames", ()))
    if item.get_closest_marker("serial") or SERIAL_FIXTURES & fixtures:
        return SERIAL_GROUP
    if item.get_closest_marker("bpf") and not CLUSTER_FIXTURES & fixtures:
        return SERIAL_GROUP
    if CLUSTER_FIXTURES & fixtures:
        # A cluster started by hand is one for every worker: then its tests are one group.
        if os.environ.get("KUBEPROF_E2E_RUN_DIR"):
            return SERIAL_GROUP
        # A module's tests share module-scoped fixtures (an operator, namespaces): one worker.
        return f"{CLUSTER_GROUP}:{item.nodeid.split('::', 1)[0]}"
    if "postgres_dsn" in fixtures or _shares_a_fixture(item):
        # Its module-scoped fixtures (a database, recorded sessions, an installed venv) are
        # set up once, on one worker, not once per worker its tests landed on.
        return item.nodeid.split("::", 1)[0]
    return None


def _shares_a_fixture(item: pytest.Item) -> bool:
    """The test uses a fixture of class, module or package scope."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d and d[-1].scope in ("class", "module", "package") for d in defs)


@pytest.hookimpl(tryfirst=True)  # before -m selects on the `serial` marks added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its group (and `serial` for the machine-wide ones); an xdist
    worker hands the groups to the main process's scheduler (tests/support/xdist_groups.py).
    """
    groups: dict[str, str] = {}
    for item in items:
        if "helm_built" in getattr(item, "fixturenames", ()) and item.nodeid.startswith(
            "tests/unit/"
        ):
            raise pytest.UsageError(
                f"{item.nodeid} needs helm: put it in tests/chart (make unit runs without helm)"
            )
        group = group_of(item)
        if group == SERIAL_GROUP:
            item.add_marker(pytest.mark.serial)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            groups[item.nodeid] = group
    prefix = os.environ.get("KUBEPROF_TEST_GROUPS")
    workerinput = getattr(config, "workerinput", None)
    if prefix and workerinput is not None:
        from tests.support import xdist_groups

        xdist_groups.write(prefix, workerinput["workerid"], groups)
