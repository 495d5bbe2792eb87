"""Selector -> target pods -> nodes: pure functions over pod objects from the API.

A pod is a target when it matches the label selector in the target namespace, runs on a
node (spec.nodeName set), is not finished, and its node matches the optional node
selector. The agent on a node profiles the pods the operator lists for that node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Target:
    """One pod to profile."""

    uid: str
    name: str
    namespace: str
    node: str


def node_matches(labels: Mapping[str, str], node_selector: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in node_selector.items())


def resolve(
    pods: Iterable[Mapping[str, Any]],
    node_labels: Mapping[str, Mapping[str, str]],
    node_selector: Mapping[str, str] | None = None,
) -> list[Target]:
    """Target pods among `pods` (already filtered by namespace and labels by the API)."""
    out = []
    for pod in pods:
        meta, spec = pod.get("metadata", {}), pod.get("spec", {})
        status = pod.get("status", {})
        node = spec.get("nodeName")
        if not node or status.get("phase") in ("Succeeded", "Failed"):
            continue
        if meta.get("deletionTimestamp"):
            continue
        if node_selector and not node_matches(node_labels.get(node, {}), node_selector):
            continue
        out.append(Target(meta["uid"], meta["name"], meta.get("namespace", ""), node))
    return sorted(out, key=lambda t: (t.node, t.namespace, t.name))


def nodes_of(targets: Iterable[Target]) -> list[str]:
    """Distinct nodes of the targets, sorted (the DaemonSet's affinity list)."""
    return sorted({t.node for t in targets})
