"""A GPU-only DaemonSet lands exactly once on every simulated GPU node, and goes away."""

import json
import time
import uuid
from collections.abc import Callable

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.e2e

DS = """
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: gpu-probe
  namespace: {ns}
spec:
  selector:
    matchLabels: {{app: gpu-probe}}
  template:
    metadata:
      labels: {{app: gpu-probe}}
    spec:
      nodeSelector:
        nvidia.com/gpu.present: "true"
      containers:
      - name: probe
        image: registry.invalid/kubeprof/probe:0
"""


def _poll(fn: Callable[[], object], timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def _pods(cluster: Cluster, ns: str) -> list[dict]:
    out = cluster.kubectl("get", "pods", "-n", ns, "-l", "app=gpu-probe", "-o", "json").stdout
    return json.loads(out)["items"]


def _node_names(cluster: Cluster, selector: str) -> set[str]:
    out = cluster.kubectl("get", "nodes", "-l", selector, "-o", "name").stdout
    return {n.removeprefix("node/") for n in out.split()}


@pytest.fixture
def namespace(k8s_cluster: Cluster):
    ns = f"e2e-ds-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("create", "namespace", ns)
    yield ns
    k8s_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_gpu_daemonset_runs_once_per_gpu_node(k8s_cluster: Cluster, namespace: str) -> None:
    gpu = _node_names(k8s_cluster, "nvidia.com/gpu.present=true")
    cpu = _node_names(k8s_cluster, "!nvidia.com/gpu.present")
    assert len(gpu) == k8s_cluster.gpu_nodes and cpu

    k8s_cluster.kubectl("apply", "-f", "-", stdin=DS.format(ns=namespace))

    def all_running() -> list[dict] | None:
        pods = _pods(k8s_cluster, namespace)
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return pods if len(running) == len(gpu) == len(pods) else None

    pods = _poll(all_running, 90, f"{len(gpu)} Running gpu-probe pods")
    placed = [p["spec"]["nodeName"] for p in pods]
    assert sorted(placed) == sorted(gpu), "exactly one pod per GPU node"
    assert not set(placed) & cpu, "no pod on CPU-only nodes"

    ds = json.loads(
        k8s_cluster.kubectl("get", "ds", "gpu-probe", "-n", namespace, "-o", "json").stdout
    )
    _poll(
        lambda: (
            json.loads(
                k8s_cluster.kubectl("get", "ds", "gpu-probe", "-n", namespace, "-o", "json").stdout
            )["status"].get("numberReady")
            == len(gpu)
        ),
        60,
        "DaemonSet status numberReady",
    )
    assert ds["status"]["desiredNumberScheduled"] == len(gpu)

    k8s_cluster.kubectl("delete", "ds", "gpu-probe", "-n", namespace)
    _poll(lambda: not _pods(k8s_cluster, namespace), 90, "gpu-probe pods to be deleted")
