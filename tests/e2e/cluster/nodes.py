"""Simulated node objects that kwok manages: GPU nodes like an 8x H200 host, and CPU nodes."""

from concurrent.futures import ThreadPoolExecutor

from .kubeapi import KubeApi
from .versions import KWOK

MANAGED_BY = {"kwok.x-k8s.io/node": "fake"}
GPU_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H200",
    "nvidia.com/gpu.count": "8",
}
GPU_RESOURCES = {"cpu": "192", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": "8"}
CPU_RESOURCES = {"cpu": "32", "memory": "128Gi", "pods": "110"}


def node(name: str, gpu: bool) -> dict:
    """One Node with status: capacity AND allocatable, since kwok only defaults missing ones.

    No kwok NoSchedule taint: every node is fake, and DaemonSets would not tolerate it.
    """
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        "kubeprof.dev/e2e-node": "gpu" if gpu else "cpu",
        **(GPU_LABELS if gpu else {}),
    }
    res = GPU_RESOURCES if gpu else CPU_RESOURCES
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": dict(MANAGED_BY)},
        "status": {
            "capacity": dict(res),
            "allocatable": dict(res),
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": f"kwok-{KWOK}",
                "kubeProxyVersion": f"kwok-{KWOK}",
            },
        },
    }


def names(gpu_nodes: int, cpu_nodes: int) -> list[tuple[str, bool]]:
    """Stable names, zero-padded so kubectl sorts them naturally."""
    return [(f"kwok-gpu-{i:04d}", True) for i in range(gpu_nodes)] + [
        (f"kwok-cpu-{i:04d}", False) for i in range(cpu_nodes)
    ]


def create(api: KubeApi, gpu_nodes: int, cpu_nodes: int, workers: int = 16) -> int:
    """Create missing nodes in parallel (1,000 in seconds); returns how many were new."""
    todo = names(gpu_nodes, cpu_nodes)
    with ThreadPoolExecutor(max_workers=workers) as ex:
        made = ex.map(lambda nb: api.create("/api/v1/nodes", node(*nb)), todo)
        return sum(made)


def count_ready(api: KubeApi) -> int:
    """Nodes of ours whose Ready condition is True (set by kwok's node-initialize stage)."""
    items = api.get("/api/v1/nodes?labelSelector=kubeprof.dev%2Fe2e-node")["items"]
    conds = (n["status"].get("conditions", []) for n in items)
    return sum(any(c["type"] == "Ready" and c["status"] == "True" for c in cs) for cs in conds)


def count_leased(api: KubeApi) -> int:
    """Node leases kwok renews; without them KCM would mark nodes Unknown and pods NotReady."""
    items = api.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")["items"]
    return sum(i["metadata"]["name"].startswith("kwok-") for i in items)
