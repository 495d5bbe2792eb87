"""The product's main path on the real control plane: example session -> real agent on a
simulated GPU node -> real samples of a process in the pod's cgroup -> Completed status.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from urllib.request import urlopen

import psycopg
import pytest
import yaml

from kubeprof.agent.cluster.client import IngestClient
from kubeprof.model import Batch, GpuMetricSample
from kubeprof.protocol.codec import encode
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.bpf]
NS = "ml-team"  # the example's namespace
NAME = "trainer-profile"


@pytest.fixture(scope="module")
def workdir():
    d = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-op-"))
    yield d
    print(f"\noperator e2e logs: {d}")


@pytest.fixture(scope="module")
def operator(k8s_cluster: Cluster, postgres_dsn, workdir: Path):
    if os.geteuid() != 0:
        pytest.skip("needs root (cgroups, eBPF)")
    h.apply_crd(k8s_cluster)
    op = h.Operator(k8s_cluster, postgres_dsn.url, workdir).start()
    yield op
    op.stop()


def test_example_session_completes_with_real_samples(
    k8s_cluster: Cluster, postgres_dsn, operator: h.Operator, workdir: Path
):
    c = k8s_cluster
    c.kubectl("create", "namespace", NS, check=False)
    h.ensure_absent(c, NS, NAME)
    c.kubectl("apply", "-f", "-", stdin=h.deployment_yaml("trainer", NS))
    pod = h.poll(lambda: h.running_pods(c, NS, "trainer"), 60, "trainer pod Running")[0]
    uid, node = pod["metadata"]["uid"], pod["spec"]["nodeName"]
    assert node.startswith("kwok-gpu-")

    workload = h.PodProcess(uid, seconds=120).start()
    agent = None
    try:
        example = yaml.safe_load(h.EXAMPLE.read_text())
        assert example["metadata"] == {"name": NAME, "namespace": NS}
        example["spec"]["duration"] = "25s"  # the example's 2m, shortened for the test
        c.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(example))

        h.poll(lambda: h.phase(c, NS, NAME) == "Running", 60, "phase Running")
        ds = h.poll(
            lambda: h.get_json(c, "get", "ds", "-n", NS, f"kubeprof-{NAME}-agent"),
            30,
            "agent DaemonSet",
        )
        terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert [t["matchFields"][0]["values"] for t in terms] == [[node]]
        assert ds["metadata"]["ownerReferences"][0]["kind"] == "ProfilingSession"
        sc = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
        assert sc["privileged"] is False and sc["capabilities"]["drop"] == ["ALL"]
        assert "SYS_ADMIN" not in sc["capabilities"]["add"]

        token = h.session_token(c, NS, NAME)
        agent = h.start_agent(operator, NS, NAME, node, token, workdir)
        # kwok nodes have no GPU, so the NVML collector is off; deliver what it would read
        # on this node (device 0 at 25 % utilization, used by the workload) through the
        # same ingest API and token, to check GPU idle reaches status and /metrics.
        # On this host's CLOCK_MONOTONIC, as NVML's readings are: a node's records must fit
        # in the session's span (kubeprof.protocol.bounds).
        t = time.monotonic_ns()
        nvml = Batch(
            gpu_metrics=(
                GpuMetricSample(t + 1, 0, "gpu_util_pct", 20.0),
                GpuMetricSample(t + 2, 0, "gpu_util_pct", 30.0),
                GpuMetricSample(t + 2, 0, "proc_sm_util_pct", 25.0, pid=workload.popen.pid),
            )
        )
        ans = IngestClient(operator.url, NS, NAME, token).post_batch(
            encode(nvml, batch_id=f"{node}-nvml-1", node=node), f"{node}-nvml-1"
        )
        assert ans.status == 200, ans
        h.poll(lambda: h.phase(c, NS, NAME) == "Completed", 150, "phase Completed")
        rc = agent.popen.wait(60)
        assert rc == 0, agent.text()[-3000:]
    finally:
        workload.stop()
        if agent is not None and agent.alive():
            agent.stop()

    st = h.session(c, NS, NAME)["status"]
    assert st["samples"] > 20, st
    assert any("kubeprof_e2e" in s for s in st["topStacks"]), st["topStacks"]
    assert st["summary"]["pods"][0]["name"] == f"{NS}/{pod['metadata']['name']}"
    assert st["summary"]["pods"][0]["samples"] > 0
    assert st["gpuIdle"] == "75%" and st["topFinding"].startswith("GPU idle 75%")
    assert st["summary"]["pods"][0]["gpuIdle"] == "75%"
    assert {c_["type"]: c_["status"] for c_ in st["conditions"]}["Completed"] == "True"
    assert len(json.dumps(st)) < 8000, "status must stay small"

    table = c.kubectl("get", "profilingsessions", "-n", NS).stdout
    assert "Completed" in table and "TOP-FINDING" in table and "GPU-IDLE" in table, table

    # The web UI's API on the operator's own port: the list, and the pod's flame graph.
    with urlopen(f"{operator.url}/api/v1/sessions", timeout=30) as r:
        listed = {(x["namespace"], x["name"]): x for x in json.load(r)["sessions"]}
    row = listed[(NS, NAME)]
    assert (row["phase"], row["nodes"], row["pods"]) == ("completed", 1, 1), row
    assert row["gpuIdle"] == 0.75 and row["topFinding"].startswith("GPU idle 75%"), row
    with urlopen(
        f"{operator.url}/api/v1/sessions/{NS}/{NAME}/flamegraph?view=cpu&pod={uid}", timeout=60
    ) as r:
        body = r.read().decode()
    assert token not in body
    cpu = json.loads(body)["views"]["cpu"]
    assert cpu["samples"][0] == st["summary"]["pods"][0]["samples"]
    assert any("kubeprof_e2e" in n for n in cpu["names"])

    with psycopg.connect(postgres_dsn.libpq) as conn:
        sid = conn.execute(
            "SELECT id FROM sessions WHERE name = %s", (st["storeSession"],)
        ).fetchone()[0]
        procs = conn.execute(
            "SELECT DISTINCT pod_uid, container_id FROM processes "
            "WHERE session_id = %s AND node = %s",
            (sid, node),
        ).fetchall()
        assert (uid, workload.container_id) in procs, procs
        n = conn.execute(
            "SELECT samples FROM session_aggregates WHERE session_id = %s "
            "AND scope = 'pod' AND key = %s",
            (sid, uid),
        ).fetchone()[0]
        assert n > 0
    exposed = operator.metrics()
    assert 'kubeprof_ingest_batches_total{result="stored"}' in exposed
    # the live idle series ended with the session; the pod's completed figure stays
    assert f'session="{NAME}",session_namespace="{NS}"}}' not in "".join(
        ln for ln in exposed.splitlines() if ln.startswith("kubeprof_gpu_idle_ratio{")
    ), exposed
    assert (
        f'kubeprof_pod_gpu_idle_ratio{{namespace="{NS}",pod="{pod["metadata"]["name"]}",'
        f'session="{NAME}",session_namespace="{NS}",source="nvml"}} 0.75'
    ) in exposed, exposed
    print(table)

    h.delete_session(c, NS, NAME)
    h.poll(
        lambda: not h.get_json(c, "get", "profilingsession", "-n", NS, NAME), 60, "session deleted"
    )
    h.poll(
        lambda: not h.get_json(c, "get", "ds", "-n", NS, f"kubeprof-{NAME}-agent"),
        60,
        "DaemonSet gone",
    )
    h.poll(
        lambda: not h.get_json(c, "get", "secret", "-n", NS, f"kubeprof-{NAME}-ingest"),
        60,
        "Secret gone",
    )
    c.kubectl("delete", "deployment", "-n", NS, "trainer", "--wait=false", check=False)
