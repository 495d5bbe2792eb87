"""PID -> (namespace, pod, container) through /proc/<pid>/cgroup and the node's pod list.

The cgroup names the pod UID and container id (kubeprof.agent.cluster.cgroups); names come
from the pods the API lists on this node. A process whose pod is not (yet) listed is left
unattributed rather than labelled with a guess.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubeprof.agent.cluster.cgroups import parse_proc_cgroup
from kubeprof.agent.light.window import Owner


@dataclass(frozen=True, slots=True)
class PodNames:
    """A pod's names and its containers' runtime ids -> container names."""

    namespace: str
    name: str
    containers: Mapping[str, str]


def pod_names(pods: Iterable[Mapping[str, Any]]) -> dict[str, PodNames]:
    """pod UID -> PodNames from API pod objects (plain dicts)."""
    out = {}
    for p in pods:
        meta = p.get("metadata") or {}
        statuses = [
            *((p.get("status") or {}).get("containerStatuses") or ()),
            *((p.get("status") or {}).get("initContainerStatuses") or ()),
        ]
        containers = {}
        for cs in statuses:
            cid = str(cs.get("containerID") or "")
            if "://" in cid:
                containers[cid.split("://", 1)[1]] = str(cs.get("name", ""))
        if meta.get("uid"):
            out[str(meta["uid"])] = PodNames(
                str(meta.get("namespace", "")), str(meta.get("name", "")), containers
            )
    return out


@dataclass
class Resolver:
    """Resolves PIDs against a /proc root and the current pod list."""

    proc_root: Path
    pods: dict[str, PodNames] = field(default_factory=dict)

    def __call__(self, pid: int) -> Owner | None:
        try:
            text = (self.proc_root / str(pid) / "cgroup").read_text()
        except OSError:
            return None
        ref = parse_proc_cgroup(text)
        if ref is None:
            return None
        names = self.pods.get(ref.pod_uid)
        if names is None:
            return None
        container = names.containers.get(ref.container_id, "")
        if not container and ref.container_id:
            container = f"id:{ref.container_id[:12]}"  # no status names this id (yet): say so
        return Owner(names.namespace, names.name, container)


def list_node_pods(node: str, kubeconfig: str | None) -> list[dict[str, Any]]:
    """The pods scheduled on `node` as plain dicts (in-cluster credentials, else kubeconfig)."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file=kubeconfig)
    api = client.ApiClient()
    core = client.CoreV1Api(api)
    pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
    return [api.sanitize_for_serialization(p) for p in pods.items]
