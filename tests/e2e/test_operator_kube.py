"""The operator's Kubernetes client (kubeprof.operator.kube) against the real control plane.

Each call the reconciler makes, with the answers it relies on: None for an absent object
(404), None for one that exists already (409), KubeError with the API server's message
for anything else, KubeError(0) when the server cannot be reached; and many threads
sharing one Kube, as the ingest API's executor does.
"""

from __future__ import annotations

import base64
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from kubeprof.operator import build
from kubeprof.operator.config import OperatorConfig
from kubeprof.operator.kube import Kube, KubeError
from kubeprof.operator.spec import parse
from tests.e2e import chart_cluster
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def kube(k8s_cluster: Cluster) -> Kube:
    # The operator's own identity: the chart's ServiceAccount, holding only its RBAC rules.
    return Kube(str(chart_cluster.operator_identity(k8s_cluster, {})))


@pytest.fixture
def ns(k8s_cluster: Cluster):
    name = f"e2e-kube-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("create", "namespace", name)
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def session(k8s_cluster: Cluster, ns: str) -> dict:
    """A real ProfilingSession (no operator runs here): the owner of the children."""
    h.apply_crd(k8s_cluster)
    k8s_cluster.kubectl("apply", "-f", "-", stdin=h.session_yaml("owner", ns, "nobody", "1h"))
    return h.poll(
        lambda: h.get_json(k8s_cluster, "get", "profilingsession", "-n", ns, "owner"),
        30,
        "session created",
    )


def _gpu_nodes(kube: Kube, n: int) -> list[str]:
    labels = kube.node_labels()
    nodes = sorted(k for k, v in labels.items() if v.get("nvidia.com/gpu.present") == "true")
    assert len(nodes) >= n, labels
    return nodes[:n]


def test_secret_create_get_conflict_absent(kube: Kube, session: dict, ns: str):
    sec = build.build_secret(session, "s3cret")
    name = sec["metadata"]["name"]
    assert kube.get_secret(ns, name) is None  # 404 -> None
    made = kube.create_secret(ns, sec)
    assert made is not None and made["metadata"]["uid"]
    assert kube.create_secret(ns, build.build_secret(session, "other")) is None  # 409 -> None
    got = kube.get_secret(ns, name)
    assert got is not None and base64.b64decode(got["data"]["token"]) == b"s3cret"
    ref = got["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["uid"], ref["controller"]) == (
        "ProfilingSession",
        session["metadata"]["uid"],
        True,
    )
    assert kube.delete_secret(ns, name) is True
    assert kube.delete_secret(ns, name) is False
    assert kube.get_secret(ns, name) is None


def test_daemonset_create_get_patch_delete(kube: Kube, k8s_client, session: dict, ns: str):
    cfg = OperatorConfig(database_url="", agent_image="registry.invalid/kubeprof:0")
    spec = parse(session["spec"])
    one, two = _gpu_nodes(kube, 2)
    ds = build.build_daemonset(session, spec, [one], cfg, end_time=1.0)
    name = ds["metadata"]["name"]
    assert kube.get_daemonset(ns, name) is None
    made = kube.create_daemonset(ns, ds)
    assert made is not None and made["kind"] == "DaemonSet"
    assert kube.create_daemonset(ns, ds) is None  # 409

    patch = {"spec": {"template": {"spec": {"affinity": build.node_affinity([two, one])}}}}
    patched = kube.patch_daemonset(ns, name, patch)
    terms = patched["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    # A merge patch replaces the list whole: exactly the patched terms, sorted by node.
    assert [t["matchFields"][0]["values"] for t in terms] == [[one], [two]]
    seen = client.AppsV1Api(k8s_client).read_namespaced_daemon_set(name, ns)
    assert (
        len(
            seen.spec.template.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
        )
        == 2
    )
    got = kube.get_daemonset(ns, name)
    assert (
        got is not None
        and got["spec"]["template"]["spec"]["affinity"]
        == patched["spec"]["template"]["spec"]["affinity"]
    )

    with pytest.raises(KubeError) as err:
        kube.patch_daemonset(ns, "no-such-ds", patch)
    assert err.value.status == 404  # patch has no "absent" answer: the caller checked

    assert kube.delete_daemonset(ns, name) is True
    h.poll(lambda: kube.get_daemonset(ns, name) is None, 30, "DaemonSet gone")
    assert kube.delete_daemonset(ns, name) is False


def test_pods_by_selector_from_many_threads(kube: Kube, k8s_cluster: Cluster, ns: str):
    k8s_cluster.kubectl("apply", "-f", "-", stdin=h.deployment_yaml("web", ns, replicas=2))
    h.poll(lambda: len(h.running_pods(k8s_cluster, ns, "web")) == 2, 60, "two pods Running")
    pods = kube.list_pods(ns, "app=web")
    assert len(pods) == 2 and all(p["spec"]["nodeName"] for p in pods)
    assert kube.list_pods(ns, "app=web,tier in (none)") == []
    with ThreadPoolExecutor(8) as pool:  # one Kube, many threads (kopf's handler threads)
        answers = list(
            pool.map(lambda i: len(kube.list_pods(ns, "app=web" if i % 2 else "app=x")), range(64))
        )
    assert answers == [2 if i % 2 else 0 for i in range(64)]


def test_other_errors_carry_the_api_servers_message(kube: Kube, session: dict, ns: str):
    sec = build.build_secret(session, "t")
    sec["metadata"]["name"] = "Not_A_Valid_Name"
    with pytest.raises(KubeError) as err:
        kube.create_secret(ns, sec)
    assert err.value.status == 422 and "Not_A_Valid_Name" in err.value.message
    assert str(err.value).startswith("HTTP 422: ")


def test_unreachable_server_is_a_kube_error(k8s_cluster: Cluster, tmp_path: Path):
    cfg = yaml.safe_load(k8s_cluster.kubeconfig.read_text())
    cfg["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(KubeError) as err:
        Kube(str(path)).get_secret("default", "x")
    assert err.value.status == 0 and "unreachable" in str(err.value)
