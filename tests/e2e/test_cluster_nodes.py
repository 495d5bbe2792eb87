"""The simulated nodes look like the issue says: Ready, GPU labels, 8 GPUs allocatable."""

import pytest
from kubernetes import client

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.e2e


def test_nodes_ready_with_gpu_capacity(k8s_cluster: Cluster, k8s_client) -> None:
    nodes = client.CoreV1Api(k8s_client).list_node().items
    gpu = [n for n in nodes if n.metadata.labels.get("nvidia.com/gpu.present") == "true"]
    assert len(gpu) == k8s_cluster.gpu_nodes
    if k8s_cluster.cpu_nodes >= 0:
        assert len(nodes) - len(gpu) == k8s_cluster.cpu_nodes
    for n in nodes:
        ready = {c.type: c.status for c in n.status.conditions}.get("Ready")
        assert ready == "True", n.metadata.name
        assert not [t for t in n.spec.taints or [] if t.effect == "NoSchedule"]
    for n in gpu:
        assert n.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H200"
        assert n.metadata.labels["nvidia.com/gpu.count"] == "8"
        assert n.status.capacity["nvidia.com/gpu"] == "8"
        assert n.status.allocatable["nvidia.com/gpu"] == "8"
    leases = client.CoordinationV1Api(k8s_client).list_namespaced_lease("kube-node-lease").items
    assert {n.metadata.name for n in nodes} <= {lease.metadata.name for lease in leases}
    for n in nodes:
        if n not in gpu:
            assert "nvidia.com/gpu" not in (n.status.allocatable or {})


def test_up_again_reuses_running_cluster(k8s_cluster: Cluster) -> None:
    """A second up() on a running cluster is a cheap no-op (what `make cluster-up` relies on)."""
    if k8s_cluster.cpu_nodes < 0:
        pytest.skip("reused hand-started cluster")
    server = k8s_cluster.server
    assert k8s_cluster.is_running()
    k8s_cluster.up()
    assert k8s_cluster.server == server
    assert k8s_cluster.kubectl("get", "nodes").returncode == 0
