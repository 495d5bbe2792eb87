"""Restart safety and outages: the operator killed mid-session, PostgreSQL stopped mid-ingest.

In both, a real agent keeps collecting from a process in a pod cgroup; the session must
complete with every spooled batch stored exactly once.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster, Postgres
from tests.e2e.cluster import postgres as pg_module

pytestmark = [pytest.mark.e2e, pytest.mark.bpf]


@pytest.fixture(scope="module")
def workdir():
    if os.geteuid() != 0:
        pytest.skip("needs root (cgroups, eBPF)")
    d = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-opres-"))
    d.chmod(0o711)
    yield d
    print(f"\noperator resilience e2e logs: {d}")


def _finish(c: Cluster, p: h.Profiled, timeout: float = 180) -> dict:
    h.poll(lambda: h.phase(c, p.namespace, p.name) == "Completed", timeout, "phase Completed")
    assert p.agent.popen.wait(150) == 0, p.agent.text()[-3000:]
    return h.session(c, p.namespace, p.name)["status"]


def _cleanup(c: Cluster, p: h.Profiled | None, ns: str) -> None:
    if p is not None:
        p.stop()
    c.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_operator_killed_mid_session_completes_without_duplicates(
    k8s_cluster: Cluster, postgres_dsn, workdir: Path
):
    c = k8s_cluster
    h.apply_crd(c)
    ns, name = f"e2e-restart-{uuid.uuid4().hex[:6]}", "restart"
    op = h.Operator(c, postgres_dsn.url, workdir / "restart").start()
    p = None
    try:
        p = h.start_profiled(c, op, ns, name, "40s", workdir)
        h.poll(
            lambda: 'kubeprof_ingest_batches_total{result="stored"}' in op.metrics(),
            60,
            "first batches stored",
        )
        time.sleep(4)
        op.kill()  # SIGKILL: no cleanup, a batch may be half-written
        time.sleep(6)  # the agent keeps collecting and spooling meanwhile
        op = h.Operator(c, postgres_dsn.url, workdir / "restart", port=op.port).start()
        st = _finish(c, p)
    finally:
        _cleanup(c, p, ns)
        op.stop()
    summary = p.agent_summary()
    assert summary["left"] == 0 and summary["rejected"] == 0, summary
    assert summary["retries"] > 0, "the outage was not noticed by the agent"
    counts = h.row_counts(postgres_dsn.libpq, st["storeSession"])
    assert counts["samples"] == counts["distinct_samples"], counts
    assert counts["batches"] == summary["spooled"], (counts, summary)
    assert st["samples"] == counts["samples"] > 0


def test_postgres_down_during_ingest_agent_retries_and_everything_arrives(
    k8s_cluster: Cluster, workdir: Path
):
    c = k8s_cluster
    h.apply_crd(c)
    pg = Postgres(workdir / "pg-outage").start()  # our own server: stopping it is safe
    try:
        _postgres_outage(c, pg, workdir)
    finally:
        pg.stop()


def _postgres_outage(c: Cluster, pg: Postgres, workdir: Path) -> None:
    ns, name = f"e2e-pgdown-{uuid.uuid4().hex[:6]}", "pgdown"
    op = h.Operator(c, pg.url, workdir / "pgdown").start()
    p = None
    try:
        p = h.start_profiled(c, op, ns, name, "40s", workdir)
        h.poll(
            lambda: 'kubeprof_ingest_batches_total{result="stored"}' in op.metrics(),
            60,
            "first batches stored",
        )
        port = pg.port
        pg.stop()
        h.poll(lambda: 'reason="database"' in op.metrics(), 30, "ingest refusing with 503")
        time.sleep(8)
        with pytest.MonkeyPatch.context() as mp:
            # The harness picks a new port when the old one still has TIME_WAIT sockets
            # (its probe binds without SO_REUSEADDR); PostgreSQL itself can rebind it, and
            # the operator's URL names the old port.
            mp.setattr(pg_module.ports, "is_free", lambda _port: True)
            pg.start()
        assert pg.port == port
        st = _finish(c, p)
    finally:
        _cleanup(c, p, ns)
        op.stop()
    summary = p.agent_summary()
    assert summary["left"] == 0 and summary["rejected"] == 0, summary
    assert summary["retries"] > 0, summary
    counts = h.row_counts(pg.dsn, st["storeSession"])
    assert counts["batches"] == summary["spooled"], (counts, summary)
    assert counts["samples"] == counts["distinct_samples"] == st["samples"] > 0, counts
