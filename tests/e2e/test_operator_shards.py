"""A session's agents sharded over several DaemonSets, on the real control plane.

The operator runs with `--agent-shard-nodes 2`, so the e2e cluster's GPU nodes need several
agent DaemonSets. The test shows: the shards together pin exactly the nodes hosting targets
and the DaemonSet controller schedules one agent per pinned node; a node added while the
session runs gets an agent without moving any other; a node removed loses its agent and an
emptied shard goes; at the session's end the operator removes every shard.
(bench/operator_scale.py does the same at 10,000 nodes with the default shard size.)
"""

from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path

import pytest
import yaml

from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster
from tests.e2e.cluster.nodes import node as node_object

pytestmark = pytest.mark.e2e

SHARD = 2
SESSION = "sharded"


@pytest.fixture(scope="module")
def operator(k8s_cluster: Cluster, postgres_dsn):
    h.apply_crd(k8s_cluster)
    d = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-shards-"))
    op = h.Operator(
        k8s_cluster, postgres_dsn.url, d, args=("--agent-shard-nodes", str(SHARD))
    ).start()
    yield op
    op.stop()
    print(f"\noperator log: {op.workdir}")


def _trainer(ns: str) -> str:
    """One target pod per GPU node (a DaemonSet), so new GPU nodes get one too."""
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "trainer", "namespace": ns},
            "spec": {
                "selector": {"matchLabels": {"app": "trainer"}},
                "template": {
                    "metadata": {"labels": {"app": "trainer"}},
                    "spec": {
                        "nodeSelector": {"nvidia.com/gpu.present": "true"},
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "main", "image": "registry.invalid/t:0"}],
                    },
                },
            },
        }
    )


def _shards(c: Cluster, ns: str) -> dict[str, dict]:
    got = (
        h.get_json(
            c,
            "get",
            "ds",
            "-n",
            ns,
            "-l",
            f"kubeprof.dev/session={SESSION},app.kubernetes.io/component=agent",
        )
        or {}
    )
    return {d["metadata"]["name"]: d for d in got.get("items", [])}


def _pinned(ds: dict) -> list[str]:
    terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    return sorted(t["matchFields"][0]["values"][0] for t in terms)


def _target_nodes(c: Cluster, ns: str) -> list[str]:
    return sorted({p["spec"]["nodeName"] for p in h.running_pods(c, ns, "trainer")})


def _agent_nodes(c: Cluster, ns: str) -> dict[str, str]:
    """Node -> the DaemonSet owning the Running agent pod there."""
    pods = h.get_json(c, "get", "pods", "-n", ns, "-l", "app.kubernetes.io/component=agent")
    out = {}
    for p in (pods or {}).get("items", []):
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"):
            out[p["spec"]["nodeName"]] = p["metadata"]["ownerReferences"][0]["name"]
    return out


def _settled(c: Cluster, ns: str) -> dict[str, list[str]] | None:
    """Shard name -> pinned nodes once the shards pin exactly the target nodes, each within
    the size, the DaemonSet controller desires and runs one agent per pinned node, and no
    agent runs elsewhere; else None."""
    targets = _target_nodes(c, ns)
    sets = _shards(c, ns)
    pinned = {name: _pinned(ds) for name, ds in sets.items()}
    if sorted(n for ns_ in pinned.values() for n in ns_) != targets:
        return None
    if any(len(v) > SHARD for v in pinned.values()):
        return None
    for name, ds in sets.items():
        st = ds.get("status") or {}
        if not (st.get("desiredNumberScheduled") == st.get("numberReady") == len(pinned[name])):
            return None
    agents = _agent_nodes(c, ns)
    want = {n: name for name, nodes in pinned.items() for n in nodes}
    return pinned if agents == want else None


def test_agents_sharded_follow_nodes_added_and_removed_and_all_go_at_the_end(
    k8s_cluster: Cluster, operator
):
    c = k8s_cluster
    ns = f"e2e-shard-{uuid.uuid4().hex[:6]}"
    extra = f"kwok-gpu-shard-{uuid.uuid4().hex[:6]}"
    c.kubectl("create", "namespace", ns)
    try:
        h.poll(
            lambda: c.kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0,
            60,
            "default ServiceAccount",
        )
        c.kubectl("apply", "-f", "-", stdin=_trainer(ns))
        gpu = sorted(
            n["metadata"]["name"]
            for n in h.get_json(c, "get", "nodes", "-l", "nvidia.com/gpu.present=true")["items"]
        )
        h.poll(lambda: _target_nodes(c, ns) == gpu, 90, f"a target pod on each of {len(gpu)}")
        assert len(gpu) > SHARD, "the cluster needs more GPU nodes than one shard holds"

        c.kubectl("apply", "-f", "-", stdin=h.session_yaml(SESSION, ns, "trainer", "150s"))
        before = h.poll(lambda: _settled(c, ns), 120, "agents on every target node")
        assert len(before) == -(-len(gpu) // SHARD), before
        st = h.session(c, ns, SESSION)["status"]
        assert st["phase"] == "Running" and st["nodes"] == len(gpu)
        h.poll(
            lambda: (
                h.session(c, ns, SESSION)["status"]["agents"]
                == {"ready": len(gpu), "expected": len(gpu), "daemonSets": len(before)}
            ),
            30,
            "status.agents summed over the shards",
        )

        # A GPU node joins: its target pod gets an agent; no other agent moves.
        assert c.api.create("/api/v1/nodes", node_object(extra, True))
        grown = h.poll(
            lambda: (s := _settled(c, ns)) and extra in json.dumps(s) and s,
            120,
            f"an agent on the new node {extra}",
        )
        for name, nodes in before.items():
            assert set(nodes) <= set(grown.get(name, [])), (name, before, grown)
        assert len(grown) == -(-(len(gpu) + 1) // SHARD)

        # It leaves again: its agent goes, and a shard left with no node is deleted.
        c.kubectl("delete", "node", extra, "--wait=false")
        shrunk = h.poll(
            lambda: (s := _settled(c, ns)) and extra not in json.dumps(s) and s,
            180,
            f"the agent on {extra} gone",
        )
        assert shrunk == before, (before, shrunk)

        # At the end (150 s) every shard is removed by the operator, not by GC.
        h.poll(lambda: h.phase(c, ns, SESSION) == "Completed", 240, "Completed")
        h.poll(lambda: not _shards(c, ns), 30, "no agent DaemonSet left")
        assert h.get_json(c, "get", "profilingsession", "-n", ns, SESSION), "session kept"
    finally:
        c.kubectl("delete", "node", extra, "--wait=false", check=False)
        c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
