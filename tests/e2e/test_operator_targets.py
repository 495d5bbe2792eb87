"""Targets, credentials and validation on the real control plane (no eBPF needed).

- invalid specs are refused by the API server with messages naming the field;
- a selector matching nothing says so and ends Failed(NoMatchingPods), crashing nothing;
- pods appearing and vanishing re-pin the agent DaemonSet; deleting a running session
  garbage-collects its DaemonSet and Secret;
- an agent holding another session's token is refused (403);
- a session asking for kernel tracing is told it is not available yet, and its carbon
  settings reach the results database.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest
import yaml

from kubeprof.agent.cluster.client import IngestClient, Outcome
from kubeprof.model import Batch, ProcessInfo
from kubeprof.protocol.codec import encode
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def operator(k8s_cluster: Cluster, postgres_dsn):
    h.apply_crd(k8s_cluster)
    d = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-optgt-"))
    op = h.Operator(k8s_cluster, postgres_dsn.url, d).start()
    yield op
    op.stop()
    print(f"\noperator log: {op.workdir}")


@pytest.fixture
def ns(k8s_cluster: Cluster):
    name = f"e2e-op-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("create", "namespace", name)
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _apply(c: Cluster, doc: dict) -> tuple[int, str]:
    r = c.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(doc), check=False)
    return r.returncode, r.stdout + r.stderr


def test_invalid_specs_are_rejected_with_field_names(k8s_cluster: Cluster, ns: str):
    h.apply_crd(k8s_cluster)
    base = yaml.safe_load(h.session_yaml("bad", ns, "x"))
    cases = [
        ({"duration": "-5m"}, "spec.duration"),
        ({"duration": "30d"}, "spec.duration"),
        ({"duration": "48h"}, "spec.duration must be between 1s and 24h"),
        ({"profilers": {"cpu": {"frequencyHz": 100000}}}, "spec.profilers.cpu.frequencyHz"),
        ({"profilers": {"cpu": {"frequencyHz": 0}}}, "spec.profilers.cpu.frequencyHz"),
        ({"profilers": {"gpu": {"metricsIntervalMs": 1}}}, "spec.profilers.gpu.metricsIntervalMs"),
        ({"bogus": True}, 'unknown field "spec.bogus"'),
        (
            {"target": {"namespace": ns, "podSelector": {}}},
            "spec.target.podSelector must not be empty",
        ),
        ({"target": {"namespace": ns}}, "spec.target.podSelector: Required value"),
        ({"carbon": {"cloudProvider": "aws", "region": "x", "pue": 0.5}}, "spec.carbon.pue"),
        (
            {"profilers": {"cpu": {"enabled": False}, "gpu": {"enabled": False}}},
            "at least one of cpu and gpu",
        ),
    ]
    for change, expected in cases:
        doc = yaml.safe_load(yaml.safe_dump(base))
        doc["spec"].update(change)
        rc, out = _apply(k8s_cluster, doc)
        assert rc != 0 and expected in out, (change, out)
    doc = yaml.safe_load(yaml.safe_dump(base))
    del doc["spec"]["duration"]
    rc, out = _apply(k8s_cluster, doc)
    assert rc != 0 and "spec.duration: Required value" in out, out

    rc, out = _apply(k8s_cluster, base)  # valid: created
    assert rc == 0, out
    changed = yaml.safe_load(yaml.safe_dump(base))
    changed["spec"]["duration"] = "10m"
    rc, out = _apply(k8s_cluster, changed)
    assert rc != 0 and "spec is immutable" in out, out
    h.ensure_absent(k8s_cluster, ns, "bad")


def test_selector_matching_nothing_fails_with_reason(k8s_cluster: Cluster, operator, ns: str):
    c = k8s_cluster
    c.kubectl("apply", "-f", "-", stdin=h.session_yaml("nomatch", ns, "nobody", "6s"))
    h.poll(
        lambda: (h.session(c, ns, "nomatch").get("status") or {}).get("reason") == "NoMatchingPods",
        30,
        "NoMatchingPods while pending",
    )
    st = h.session(c, ns, "nomatch")["status"]
    assert st["phase"] == "Pending" and "no pod matches" in st["message"]
    h.poll(lambda: h.phase(c, ns, "nomatch") == "Failed", 60, "Failed at end time")
    st = h.session(c, ns, "nomatch")["status"]
    assert st["reason"] == "NoMatchingPods" and st["pods"] == 0
    assert operator.proc.alive()
    assert not h.get_json(c, "get", "ds", "-n", ns, "kubeprof-nomatch-agent")


def _ds_nodes(c: Cluster, ns: str, name: str) -> list[str]:
    ds = h.get_json(c, "get", "ds", "-n", ns, f"kubeprof-{name}-agent")
    if not ds:
        return []
    terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    return sorted(t["matchFields"][0]["values"][0] for t in terms)


def _pod_nodes(c: Cluster, ns: str, app: str) -> list[str]:
    return sorted({p["spec"]["nodeName"] for p in h.running_pods(c, ns, app)})


def test_pods_appearing_and_vanishing_repin_agents_and_delete_cleans_up(
    k8s_cluster: Cluster, operator, ns: str
):
    c = k8s_cluster
    c.kubectl("apply", "-f", "-", stdin=h.deployment_yaml("web", ns, replicas=1))
    h.poll(lambda: h.running_pods(c, ns, "web"), 60, "first pod")
    c.kubectl("apply", "-f", "-", stdin=h.session_yaml("churn", ns, "web", "10m"))
    h.poll(lambda: h.phase(c, ns, "churn") == "Running", 60, "Running")
    h.poll(lambda: _ds_nodes(c, ns, "churn") == _pod_nodes(c, ns, "web"), 30, "pinned to 1")

    c.kubectl("scale", "deployment", "-n", ns, "web", "--replicas=3")
    h.poll(lambda: len(h.running_pods(c, ns, "web")) == 3, 60, "3 pods")
    want = _pod_nodes(c, ns, "web")
    h.poll(lambda: _ds_nodes(c, ns, "churn") == want, 30, f"DaemonSet re-pinned to {want}")
    h.poll(lambda: (h.session(c, ns, "churn")["status"].get("pods")) == 3, 30, "status pods 3")
    h.poll(
        lambda: (
            len(
                [
                    p
                    for p in (
                        h.get_json(
                            c, "get", "pods", "-n", ns, "-l", "app.kubernetes.io/component=agent"
                        )
                        or {}
                    ).get("items", [])
                    if p["status"].get("phase") == "Running"
                ]
            )
            == len(want)
        ),
        60,
        f"{len(want)} agent pods Running",
    )

    c.kubectl("scale", "deployment", "-n", ns, "web", "--replicas=0")
    h.poll(
        lambda: (h.session(c, ns, "churn")["status"].get("reason")) == "TargetsGone",
        60,
        "TargetsGone",
    )
    assert h.phase(c, ns, "churn") == "Running"
    h.poll(
        lambda: not h.get_json(c, "get", "ds", "-n", ns, "kubeprof-churn-agent"),
        30,
        "no DaemonSet without targets",
    )
    c.kubectl("scale", "deployment", "-n", ns, "web", "--replicas=1")
    h.poll(
        lambda: h.get_json(c, "get", "ds", "-n", ns, "kubeprof-churn-agent"),
        60,
        "DaemonSet back with the pod",
    )

    h.delete_session(c, ns, "churn")
    h.poll(
        lambda: not h.get_json(c, "get", "ds", "-n", ns, "kubeprof-churn-agent"),
        60,
        "DaemonSet garbage-collected",
    )
    h.poll(
        lambda: not h.get_json(c, "get", "secret", "-n", ns, "kubeprof-churn-ingest"),
        60,
        "Secret garbage-collected",
    )


def test_agent_with_another_sessions_token_is_refused(k8s_cluster: Cluster, operator, ns: str):
    c = k8s_cluster
    c.kubectl("apply", "-f", "-", stdin=h.deployment_yaml("app", ns, replicas=1))
    node = h.poll(lambda: h.running_pods(c, ns, "app"), 60, "pod")[0]["spec"]["nodeName"]
    for name in ("sess-a", "sess-b"):
        c.kubectl("apply", "-f", "-", stdin=h.session_yaml(name, ns, "app", "10m"))
    for name in ("sess-a", "sess-b"):
        h.poll(lambda n=name: h.phase(c, ns, n) == "Running", 60, f"{name} Running")
    token_a, token_b = h.session_token(c, ns, "sess-a"), h.session_token(c, ns, "sess-b")
    assert token_a != token_b

    body = encode(Batch(processes=(ProcessInfo(1, 0, "x", "x"),)), batch_id="b-1", node=node)
    wrong = IngestClient(operator.url, ns, "sess-b", token_a)
    ans = wrong.post_batch(body, "b-1")
    assert (ans.status, ans.outcome) == (403, Outcome.FORBIDDEN), ans
    assert wrong.targets(node).status == 403
    assert IngestClient(operator.url, ns, "sess-b", "").post_batch(body, "b-1").status == 401

    right = IngestClient(operator.url, ns, "sess-b", token_b)
    first, again = right.post_batch(body, "b-1"), right.post_batch(body, "b-1")
    assert first.status == again.status == 200
    assert (first.data["duplicate"], again.data["duplicate"]) == (False, True)
    pods = right.targets(node).data["pods"]
    assert [p["name"] for p in pods] == [h.running_pods(c, ns, "app")[0]["metadata"]["name"]]
    assert 'kubeprof_ingest_rejections_total{reason="forbidden"}' in operator.metrics()
    assert token_a not in operator.proc.text() and token_b not in operator.proc.text()
    status_text = str(h.session(c, ns, "sess-b")["status"])
    assert token_b not in status_text
    for name in ("sess-a", "sess-b"):
        h.delete_session(c, ns, name)


def test_kernel_tracing_is_reported_unavailable_and_carbon_is_stored(
    k8s_cluster: Cluster, operator, ns: str, postgres_dsn
):
    c = k8s_cluster
    c.kubectl(
        "apply",
        "-f",
        "-",
        stdin=h.session_yaml("kt", ns, "nobody", "10m", profilers={"gpu": {"kernelTracing": True}}),
    )

    def kernel_tracing() -> dict | None:
        conds = (h.session(c, ns, "kt").get("status") or {}).get("conditions") or []
        return next((x for x in conds if x["type"] == "KernelTracing"), None)

    cond = h.poll(kernel_tracing, 30, "KernelTracing condition")
    assert (cond["status"], cond["reason"]) == ("False", "NotAvailable")
    assert "NVML metrics only" in cond["message"]
    store_name = h.session(c, ns, "kt")["status"]["storeSession"]
    with psycopg.connect(postgres_dsn.libpq) as conn:
        row = conn.execute("SELECT meta FROM sessions WHERE name = %s", (store_name,)).fetchone()
    meta = json.loads(row[0])
    example = yaml.safe_load(h.EXAMPLE.read_text())["spec"]["carbon"]
    assert (meta["carbon:cloudProvider"], meta["carbon:region"], meta["carbon:pue"]) == (
        example["cloudProvider"],
        example["region"],
        f"{example['pue']:g}",
    )
    h.delete_session(c, ns, "kt")
