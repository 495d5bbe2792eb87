"""A session's agent DaemonSets on the API server: list them by shard, pin them, remove them.

Each shard pins at most `config.agent_shard_nodes` nodes (shards.py); the objects
themselves are built by build.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubeprof.operator import agent_failures, build, shards
from kubeprof.operator.context import Context
from kubeprof.operator.session import SessionView
from kubeprof.operator.spec import SessionSpec


def pinned_nodes(ds: Mapping[str, Any]) -> list[str]:
    """The node names a DaemonSet's required node affinity pins ([] when it has none)."""
    try:
        terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        return sorted(v for t in terms for f in t.get("matchFields", []) for v in f["values"])
    except (KeyError, IndexError, TypeError):
        return []


def by_shard(ctx: Context, s: SessionView) -> dict[int, dict]:
    """The session's agent DaemonSets by shard index (listed by the session's label)."""
    return {
        build.shard_of(ds): ds
        for ds in ctx.kube.list_daemonsets(s.namespace, build.agent_selector(s.body))
    }


def remove(ctx: Context, s: SessionView) -> None:
    """Delete every agent DaemonSet (all shards) of the session."""
    for ds in by_shard(ctx, s).values():
        ctx.kube.delete_daemonset(s.namespace, ds["metadata"]["name"])


def sync(
    ctx: Context, s: SessionView, spec: SessionSpec, nodes: list[str] | None, end_time: float
) -> list[dict]:
    """Create, re-pin or delete the agent DaemonSets (one per shard of at most
    `config.agent_shard_nodes` nodes, see shards.py) so they pin exactly `nodes`; returns
    them. `nodes` None keeps every shard as it is (aggregating: agents stay to flush)."""
    ns = s.namespace
    have = by_shard(ctx, s)
    if nodes is None:
        return list(have.values())
    if not nodes:
        remove(ctx, s)
        return []
    want = shards.assign(
        {i: pinned_nodes(ds) for i, ds in have.items()}, nodes, ctx.config.agent_shard_nodes
    )
    for i in sorted(set(have) - set(want)):
        ctx.kube.delete_daemonset(ns, have[i]["metadata"]["name"])
    out = []
    kernels: dict[str, str] | None = None
    for i, pinned in sorted(want.items()):
        ds = have.get(i)
        if ds is None:
            kernels = ctx.kube.node_kernels() if kernels is None else kernels
            obj = build.build_daemonset(
                s.body,
                spec,
                pinned,
                ctx.config,
                end_time,
                kernels=[kernels.get(n, "") for n in pinned],
                shard=i,
            )
            name = obj["metadata"]["name"]
            ds = ctx.kube.create_daemonset(ns, obj) or ctx.kube.get_daemonset(ns, name)
        elif pinned_nodes(ds) != pinned:
            patch = {"spec": {"template": {"spec": {"affinity": build.node_affinity(pinned)}}}}
            ds = ctx.kube.patch_daemonset(ns, ds["metadata"]["name"], patch)
        if ds is not None:
            out.append(ds)
    return out


def failure(ctx: Context, s: SessionView, sets: list[dict]) -> agent_failures.AgentFailure | None:
    """Why agent pods are missing (Pod Security, quota, ...), read from the events of the
    first DaemonSet (shard) that lacks pods."""
    for ds in sets:
        st = ds.get("status") or {}
        expected = int(st.get("desiredNumberScheduled", 0))
        if expected and int(st.get("currentNumberScheduled", 0)) >= expected:
            continue  # every pod exists; not ready yet is the kubelet's business
        found = agent_failures.explain(
            ctx.kube.daemonset_events(s.namespace, ds["metadata"]["name"]), s.namespace
        )
        if found is not None:
            return found
    return None
