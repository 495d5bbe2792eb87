"""The rendered chart applied to the real control plane: the API server accepts every object
(strict field validation), the scheduler places the operator's and PostgreSQL's pods on kwok
nodes, and the bundled database's claim binds.

What this does not exercise: kwok runs no containers, so the images, the probes, the
securityContext's effect and the migrations at start are not run here (the operator process
itself runs in test_operator*.py, with this chart's RBAC: operator_helpers.py). The
ServiceMonitor and PrometheusRule need the prometheus-operator CRDs, which this cluster does
not have; their rules run in real Prometheus/promtool instead (test_prometheus_alerts.py,
tests/chart/test_alert_rules.py).
"""

from __future__ import annotations

import pytest
import yaml

from tests.e2e import chart_cluster as cc
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster
from tests.support import chart
from tests.support.chart import helm_built  # noqa: F401 - the fixture

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("helm_built")]

STORAGE_CLASS = "kubeprof-e2e-manual"  # no provisioner here: a PV made by hand binds


def _pv(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": STORAGE_CLASS,
            "persistentVolumeReclaimPolicy": "Delete",
            "hostPath": {"path": f"/tmp/{name}", "type": "DirectoryOrCreate"},
        },
    }


def _pod_on_node(c: Cluster, selector: str) -> dict:
    def placed():
        pods = h.get_json(c, "get", "pods", "-n", cc.NAMESPACE, "-l", selector) or {}
        done = [
            p
            for p in pods.get("items", [])
            if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
        ]
        return done[0] if done else None

    return h.poll(placed, 90, f"a Running pod for {selector}")


def test_chart_is_accepted_and_its_pods_scheduled(k8s_cluster: Cluster):
    c = k8s_cluster
    h.apply_crd(c)
    c.kubectl("create", "namespace", cc.NAMESPACE, check=False)
    c.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(_pv("kubeprof-e2e-pg")))
    docs = chart.render(
        {
            "postgresql": {"persistence": {"size": "1Gi", "storageClass": STORAGE_CLASS}},
            "grafana": {"dashboard": {"enabled": True}},
        },
        release=cc.RELEASE,
        namespace=cc.NAMESPACE,
    )
    out = cc.apply(c, docs)
    print(out)
    for d in docs:  # each object now exists as rendered
        kind, name = d["kind"].lower(), d["metadata"]["name"]
        ns = ["-n", d["metadata"]["namespace"]] if "namespace" in d["metadata"] else []
        assert h.get_json(c, "get", kind, name, *ns), f"{kind}/{name} missing"

    op = _pod_on_node(c, "app.kubernetes.io/instance=kp,app.kubernetes.io/component=operator")
    assert op["spec"]["nodeName"].startswith("kwok-")
    assert op["spec"]["serviceAccountName"] == cc.SERVICE_ACCOUNT
    assert op["spec"]["securityContext"]["runAsNonRoot"] is True
    pg = _pod_on_node(c, "app.kubernetes.io/instance=kp,app.kubernetes.io/component=postgresql")
    assert pg["spec"]["nodeName"].startswith("kwok-")
    pvc = h.get_json(c, "get", "pvc", "-n", cc.NAMESPACE, "data-kp-kubeprof-postgresql-0")
    assert pvc["status"]["phase"] == "Bound" and pvc["spec"]["volumeName"] == "kubeprof-e2e-pg"
    h.poll(
        lambda: (
            (h.get_json(c, "get", "deployment", "-n", cc.NAMESPACE, "kp-kubeprof") or {})
            .get("status", {})
            .get("availableReplicas")
            == 1
        ),
        60,
        "the operator Deployment available (kwok marks its pod Ready)",
    )

    c.kubectl(
        "delete",
        "-n",
        cc.NAMESPACE,
        "deployment/kp-kubeprof",
        "statefulset/kp-kubeprof-postgresql",
        "pvc/data-kp-kubeprof-postgresql-0",
        "--wait=false",
        check=False,
    )
    c.kubectl("delete", "pv", "kubeprof-e2e-pg", "--wait=false", check=False)


def test_watched_namespaces_variant_is_accepted(k8s_cluster: Cluster):
    c = k8s_cluster
    for ns in ("team-a", "team-b"):
        c.kubectl("create", "namespace", ns, check=False)
    c.kubectl(
        "create",
        "secret",
        "generic",
        "ext-db",
        "-n",
        cc.NAMESPACE,
        "--from-literal=url=postgresql+psycopg://u:p@db.example:5432/k",
        check=False,
    )
    docs = chart.render(
        {
            "fullnameOverride": "kp-scoped",
            "operator": {"watchNamespaces": ["team-a", "team-b"]},
            "postgresql": {"enabled": False},
            "externalDatabase": {"existingSecret": "ext-db", "urlKey": "url"},
        },
        release=cc.RELEASE,
        namespace=cc.NAMESPACE,
    )
    cc.apply(c, docs)
    for ns in ("team-a", "team-b"):
        rb = h.get_json(c, "get", "rolebinding", "-n", ns, "kp-scoped-sessions")
        assert rb["roleRef"]["name"] == "kp-scoped-sessions"
    assert not h.get_json(c, "get", "clusterrolebinding", "kp-scoped-sessions")
    c.kubectl("delete", "-n", cc.NAMESPACE, "deployment/kp-scoped", "--wait=false", check=False)


def test_light_agent_deep_variant_is_accepted_and_scheduled_on_gpu_nodes(k8s_cluster: Cluster):
    """lightAgent.deep: the API server accepts the light DaemonSet with its capabilities,
    host mounts and projected ingest token, and the DaemonSet controller places one light
    agent on every GPU node (none on CPU nodes)."""
    c = k8s_cluster
    c.kubectl("create", "namespace", cc.NAMESPACE, check=False)
    c.kubectl(
        "create",
        "secret",
        "generic",
        "ext-db-deep",
        "-n",
        cc.NAMESPACE,
        "--from-literal=url=postgresql+psycopg://u:p@db.example:5432/k",
        check=False,
    )
    docs = chart.render(
        {
            "fullnameOverride": "kp-deep",
            "postgresql": {"enabled": False},
            "externalDatabase": {"existingSecret": "ext-db-deep", "urlKey": "url"},
            "lightAgent": {"enabled": True, "deep": True},
        },
        release=cc.RELEASE,
        namespace=cc.NAMESPACE,
    )
    cc.apply(c, docs)
    # agent.auth serviceaccount (the default): no shared light token; each light pod gets
    # its own projected token for the ingest audience
    assert h.get_json(c, "get", "secret", "-n", cc.NAMESPACE, "kp-deep-light-token") is None
    ds = next(d for d in docs if d.get("kind") == "DaemonSet" and "light" in d["metadata"]["name"])
    sources = [
        s
        for v in ds["spec"]["template"]["spec"]["volumes"]
        for s in (v.get("projected") or {}).get("sources", [])
    ]
    assert {"audience": "kubeprof.dev/ingest", "expirationSeconds": 600, "path": "token"} in [
        s.get("serviceAccountToken") for s in sources
    ], sources
    gpu = h.get_json(c, "get", "nodes", "-l", "nvidia.com/gpu.present=true")["items"]

    def placed() -> list[str]:
        pods = (
            h.get_json(
                c,
                "get",
                "pods",
                "-n",
                cc.NAMESPACE,
                "-l",
                "app.kubernetes.io/instance=kp,app.kubernetes.io/component=light-agent",
            )
            or {}
        )
        nodes = sorted(
            p["spec"].get("nodeName", "")
            for p in pods.get("items", [])
            if p["metadata"]["name"].startswith("kp-deep-light-")
        )
        return nodes if len(nodes) == len(gpu) else []

    assert h.poll(placed, 90, "a light agent on every GPU node") == sorted(
        n["metadata"]["name"] for n in gpu
    )
    ds = h.get_json(c, "get", "ds", "-n", cc.NAMESPACE, "kp-deep-light")
    sc = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert sc["capabilities"]["add"] == ["BPF", "PERFMON", "SYS_PTRACE"]
    c.kubectl(
        "delete",
        "-n",
        cc.NAMESPACE,
        "deployment/kp-deep",
        "daemonset/kp-deep-light",
        "--wait=false",
        check=False,
    )
