"""Session fixtures for e2e tests: a real control plane with kwok nodes, and PostgreSQL 15.

Each starts lazily, only for sessions with a test that asks for it, and is stopped (by the
PIDs it recorded) at the end. Environment knobs:
  KUBEPROF_E2E_GPU_NODES / KUBEPROF_E2E_CPU_NODES  node counts (default 4 / 2)
  KUBEPROF_E2E_RUN_DIR   reuse a cluster started by hand (`python -m tests.e2e.cluster up`),
                         and its PostgreSQL when that runs; both are left running afterwards
  KUBEPROF_E2E_PG_DIR    the run's shared PostgreSQL folder (set by tests/conftest.py: every
                         xdist worker and child pytest of a run uses one server)
  KUBEPROF_E2E_KEEP=1    keep the temporary run folders (logs) after the session

Each test module gets a database of its own (`postgres_dsn`), dropped after the module.
"""

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from tests.e2e.cluster import Cluster, Postgres, shared, watchdog  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker here too, so this folder runs under any pytest config."""
    config.addinivalue_line("markers", "e2e: needs a real control plane and/or PostgreSQL")


def _tmp(prefix: str) -> Path:
    # 0711 so the unprivileged postgres user can traverse it when we run as root.
    d = Path(tempfile.mkdtemp(prefix=prefix))
    d.chmod(0o711)
    return d


def _cleanup(d: Path, ok: bool) -> None:
    if ok and not os.environ.get("KUBEPROF_E2E_KEEP"):
        shutil.rmtree(d, ignore_errors=True)
    else:
        print(f"\nkubeprof e2e: kept {d} (logs)", file=sys.stderr)


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[Cluster]:
    """A running cluster: .kubeconfig, .server, .api (stdlib client), .kubectl(...), .log(c)."""
    reuse = os.environ.get("KUBEPROF_E2E_RUN_DIR")
    if reuse:
        cluster = Cluster(Path(reuse))
        if not cluster.is_running():
            pytest.fail(f"KUBEPROF_E2E_RUN_DIR={reuse} has no running cluster")
        cluster.gpu_nodes = len(
            cluster.kubectl(
                "get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "name"
            ).stdout.split()
        )
        cluster.cpu_nodes = -1  # unknown: tests derive CPU nodes from labels
        yield cluster
        return
    run = _tmp("kubeprof-e2e-k8s-")
    cluster = Cluster(
        run,
        gpu_nodes=int(os.environ.get("KUBEPROF_E2E_GPU_NODES", "4")),
        cpu_nodes=int(os.environ.get("KUBEPROF_E2E_CPU_NODES", "2")),
    )
    ok = False
    dog = watchdog.watch(cluster=run)  # stops it if this process is killed before teardown
    try:
        cluster.up()
        yield cluster
        ok = True
    finally:
        dog.cancel()
        cluster.down()
        _cleanup(run, ok)


@pytest.fixture(scope="session")
def k8s_client(k8s_cluster: Cluster):
    """kubernetes.client.ApiClient bound to the cluster's kubeconfig."""
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(k8s_cluster.kubeconfig))
    yield client
    client.close()


class PgDsn(NamedTuple):
    """Both spellings of the same database."""

    url: str  # SQLAlchemy: postgresql+psycopg://kubeprof@127.0.0.1:PORT/kp_<module>_<hex>
    libpq: str  # psycopg.connect / psql: postgresql://kubeprof@127.0.0.1:PORT/kp_<module>_<hex>


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Postgres]:
    """A PostgreSQL 15 server on a free port (trust auth, user kubeprof), shared by the run.

    In order: the hand-started one of KUBEPROF_E2E_RUN_DIR when it runs, the run's shared one
    (KUBEPROF_E2E_PG_DIR, started here if no other process has), or one of this session's own.
    """
    reuse = os.environ.get("KUBEPROF_E2E_RUN_DIR")
    if reuse and Postgres(Path(reuse) / "postgres").is_running():
        yield Postgres(Path(reuse) / "postgres")
        return
    pg_dir = os.environ.get(shared.ENV)
    if pg_dir:
        yield shared.acquire(Path(pg_dir))  # stopped by the process that named the folder
        return
    d = _tmp("kubeprof-e2e-pg-")
    pg = Postgres(d / "pg")
    ok = False
    dog = watchdog.watch(postgres=d / "pg")
    try:
        pg.start()
        yield pg
        ok = True
    finally:
        dog.cancel()
        pg.stop()
        _cleanup(d, ok)


_FAILED_MODULES: set[str] = set()  # modules with a failed test phase in this process


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """Remember the modules with a failed test (for `_module_folders`)."""
    report = yield
    if report.failed:
        _FAILED_MODULES.add(item.nodeid.split("::", 1)[0])
    return report


@pytest.fixture(scope="module", autouse=True)
def _module_folders(request: pytest.FixtureRequest) -> Iterator[None]:
    """The folders a test module makes with tempfile.mkdtemp (its operators' work folders,
    logs, spools; in its module and function fixtures and tests) are removed after the module
    when all its tests passed, kept when one failed or with KUBEPROF_E2E_KEEP=1: each e2e
    test left ~2 MB in /tmp at every run (1.2 GB here after a day of runs)."""
    made: list[str] = []
    real = tempfile.mkdtemp

    def mkdtemp(*args, **kwargs):  # type: ignore[no-untyped-def]
        path = real(*args, **kwargs)
        made.append(path)
        return path

    tempfile.mkdtemp = mkdtemp  # type: ignore[assignment]
    try:
        yield
    finally:
        tempfile.mkdtemp = real
    if request.node.nodeid.split("::", 1)[0] not in _FAILED_MODULES:
        for path in made:
            _cleanup(Path(path), ok=True)


@pytest.fixture(autouse=True)
def _operators_refused_nothing() -> Iterator[None]:
    """After each test: the API server refused no call of an operator it started (each runs
    with only the chart's RBAC, tests/e2e/operator_helpers.py), even one it left running."""
    yield
    from tests.e2e import operator_helpers

    operator_helpers.assert_no_operator_refused()


@pytest.fixture(scope="module")
def postgres_dsn(postgres_server: Postgres, request: pytest.FixtureRequest) -> Iterator[PgDsn]:
    """DSNs of a new database for this test module on the shared server (dropped after it)."""
    name = shared.database_name(request.module.__name__, uuid.uuid4().hex)
    db = postgres_server.create_database(name)
    yield PgDsn(url=db.url, libpq=db.dsn)
    if not os.environ.get("KUBEPROF_E2E_KEEP"):
        postgres_server.drop_database(name)
