"""A session whose agents never send anything says so, on the real control plane.

A real `kubeprof operator` reconciles sessions applied with kubectl; the DaemonSet controller
makes their agent pods and kwok readies them, but no agent process runs, so no batch ever
arrives. The session must not end "results stored": its status names that no data arrived
and why, from the pods as they are at the end, in `.status`, its Completed condition and
the Reason printer column. Two whys the cluster can really produce:
- the agent pods were Ready and sent nothing (NoDataAgentsSentNothing);
- Pod Security "baseline" refused the agent pods for the whole session: the API server's
  own words, from the DaemonSet controller's FailedCreate event, end in the status.
"""

from __future__ import annotations

import re
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.e2e

RUN = uuid.uuid4().hex[:6]
NS = {k: f"e2e-nodata-{k}-{RUN}" for k in ("quiet", "psa")}
APP = "trainer"


@pytest.fixture(scope="module")
def cluster(k8s_cluster: Cluster):
    h.apply_crd(k8s_cluster)
    for ns in NS.values():
        k8s_cluster.kubectl("create", "namespace", ns)
    yield k8s_cluster
    for ns in NS.values():
        k8s_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture(scope="module")
def operator(cluster: Cluster, postgres_dsn):
    """A real operator watching only this module's namespaces (the cluster may be shared)."""
    d = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-nodata-"))
    ns_args = [a for ns in NS.values() for a in ("--namespace", ns)]
    values = {"operator": {"watchNamespaces": list(NS.values())}}  # the chart's, for --namespace
    op = h.Operator(cluster, postgres_dsn.url, d, args=tuple(ns_args), chart_values=values).start()
    yield op
    op.stop()
    print(f"\nno-data operator log: {d}")


def _status(c: Cluster, ns: str, name: str) -> dict:
    return h.session(c, ns, name).get("status") or {}


def _printed_reason(c: Cluster, ns: str, name: str) -> str:
    """The Reason column of `kubectl get profilingsessions`, cut at the header's offsets."""
    lines = c.kubectl("get", "profilingsessions", "-n", ns).stdout.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", lines[0])]
    col = lines[0].split().index("REASON")
    row = next(ln for ln in lines[1:] if ln.split()[0] == name)
    return row[starts[col] : starts[col + 1]].strip()


def _stored_batches(libpq: str, store_session: str) -> int:
    with psycopg.connect(libpq) as conn:
        return int(
            conn.execute(
                "SELECT count(*) FROM ingested_batches b JOIN sessions s ON s.id = b.session_id "
                "WHERE s.name = %s",
                (store_session,),
            ).fetchone()[0]
        )


def _assert_ended_with_no_data(c: Cluster, ns: str, name: str, reason: str, pg) -> dict:
    st = h.poll(
        lambda: (s := _status(c, ns, name)).get("phase") in ("Completed", "Failed") and s,
        150,
        f"{name} ended",
    )
    assert st["phase"] == "Completed", st
    assert st["reason"] == reason, st
    assert st["reason"] != "Aggregated" and "results stored" not in st["message"], st
    assert st["message"].startswith("no data arrived: "), st["message"]
    done = {x["type"]: x for x in st["conditions"]}["Completed"]
    assert (done["reason"], done["message"]) == (reason, st["message"]), done
    assert st["topFinding"] == st["message"], st
    assert st.get("samples", 0) == 0, st
    assert _stored_batches(pg.libpq, st["storeSession"]) == 0
    assert _printed_reason(c, ns, name) == reason
    h.poll(
        lambda: not h.get_json(c, "get", "ds", "-n", ns, f"kubeprof-{name}-agent"),
        60,
        "the agent DaemonSet removed at the end",
    )
    return st


def test_ready_agents_that_sent_nothing_end_with_no_data(
    cluster: Cluster, operator: h.Operator, postgres_dsn
):
    c, ns, name = cluster, NS["quiet"], "quiet"
    c.kubectl("apply", "-f", "-", stdin=h.deployment_yaml(APP, ns))
    target = h.poll(lambda: h.running_pods(c, ns, APP), 60, "workload pod Running")[0]
    # 30 s: room for kwok to ready the agent pod on a loaded control plane before the end.
    c.kubectl("apply", "-f", "-", stdin=h.session_yaml(name, ns, APP, "30s"))

    # While it runs: the DaemonSet controller's agent pod on the target's node, made Ready
    # by kwok, is what .status.agents counts (no agent process behind it sends anything).
    def agent_pods() -> list[dict]:
        got = h.get_json(c, "get", "pods", "-n", ns, "-l", f"kubeprof.dev/session={name}")
        return (got or {}).get("items", [])

    pods = h.poll(
        lambda: [p for p in agent_pods() if p["status"].get("phase") == "Running"],
        60,
        "the agent pod Running",
    )
    assert [p["spec"]["nodeName"] for p in pods] == [target["spec"]["nodeName"]]
    st = h.poll(
        lambda: (s := _status(c, ns, name)).get("agentsReady") == "1/1" and s,
        60,
        "agents 1/1",
    )
    assert st["phase"] == "Running" and st["agents"]["ready"] == 1, st

    st = _assert_ended_with_no_data(c, ns, name, "NoDataAgentsSentNothing", postgres_dsn)
    assert "1 of 1 agent pod(s) were ready but sent nothing" in st["message"], st["message"]
    assert f"kubectl logs -n {ns} -l kubeprof.dev/session={name}" in st["message"]
    assert "--previous" not in st["message"]  # they never crashed


def test_agents_refused_for_the_whole_session_end_with_no_data_naming_pod_security(
    cluster: Cluster, operator: h.Operator, postgres_dsn
):
    c, ns, name = cluster, NS["psa"], "refused"
    c.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=baseline")
    c.kubectl("apply", "-f", "-", stdin=h.deployment_yaml(APP, ns))  # baseline-clean
    h.poll(lambda: h.running_pods(c, ns, APP), 60, "workload pod Running")
    c.kubectl("apply", "-f", "-", stdin=h.session_yaml(name, ns, APP, "20s"))

    st = _assert_ended_with_no_data(c, ns, name, "NoDataAgentsForbiddenByPodSecurity", postgres_dsn)
    # The API server's words, passed on from the DaemonSet controller's event.
    assert 'Pod Security "baseline:latest"' in st["message"], st["message"]
    assert "hostPID=true" in st["message"], st["message"]
    assert st["agents"]["ready"] == 0, st
    got = h.get_json(c, "get", "pods", "-n", ns, "-l", f"kubeprof.dev/session={name}")
    assert not (got or {}).get("items"), "no agent pod was ever admitted"
