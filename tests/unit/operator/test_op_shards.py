"""Agent DaemonSets sharded by node: bounded objects, sticky placement, every shard cleaned up."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubeprof.operator import build, shards
from kubeprof.operator.config import OperatorConfig
from kubeprof.operator.reconcile import Context, reconcile
from kubeprof.operator.registry import Registry
from kubeprof.operator.spec import parse
from kubeprof.storage import Store
from tests.unit.operator.test_op_reconcile import BODY, T0, FakeKube, _pod

KB = 1024


def test_fresh_nodes_fill_shards_in_order():
    got = shards.assign({}, [f"n{i:02d}" for i in range(7)], 3)
    assert got == {0: ["n00", "n01", "n02"], 1: ["n03", "n04", "n05"], 2: ["n06"]}


def test_nodes_stay_in_their_shard_when_others_come_and_go():
    cur = {0: ["a", "b", "c"], 1: ["d", "e", "f"], 2: ["g"]}
    # b and e leave, x and y arrive: survivors keep their shard, newcomers fill the gaps.
    got = shards.assign(cur, ["a", "c", "d", "f", "g", "x", "y"], 3)
    assert got == {0: ["a", "c", "x"], 1: ["d", "f", "y"], 2: ["g"]}
    # Every node of shard 1 leaves: the shard is dropped, the others do not move.
    assert shards.assign(got, ["a", "c", "x", "g"], 3) == {0: ["a", "c", "x"], 2: ["g"]}
    # A new node takes the lowest index with room (1 is free again).
    assert shards.assign(
        {0: ["a", "b", "c"], 2: ["g", "h", "i"]}, ["a", "b", "c", "g", "h", "i", "z"], 3
    )[1] == ["z"]


def test_a_lowered_shard_size_spills_the_excess():
    got = shards.assign({0: ["a", "b", "c", "d"]}, ["a", "b", "c", "d"], 2)
    assert got == {0: ["a", "b"], 1: ["c", "d"]}


def test_shard_size_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        shards.assign({}, ["a"], 0)


@given(
    st.dictionaries(
        st.integers(0, 6), st.lists(st.sampled_from("abcdefghijklmno"), max_size=6), max_size=5
    ),
    st.sets(st.sampled_from("abcdefghijklmnopqrstu")),
    st.integers(1, 5),
)
def test_assignment_covers_exactly_the_nodes_within_the_size(current, nodes, size):
    got = shards.assign(current, nodes, size)
    placed = [n for ns in got.values() for n in ns]
    assert sorted(placed) == sorted(nodes)  # each node exactly once
    assert all(0 < len(ns) <= size for ns in got.values())
    # A node pinned by one shard that is not over the size stays there.
    once = {
        n
        for ns in current.values()
        for n in set(ns)
        if sum(n in set(o) for o in current.values()) == 1
    }
    for idx, ns in current.items():
        if len(set(ns)) <= size:
            assert all(n in got[idx] for n in set(ns) if n in nodes and n in once)


def test_a_full_shard_stays_under_256_kb_even_with_the_longest_node_names():
    spec = parse(BODY["spec"])
    cfg = OperatorConfig(database_url="")
    nodes = [f"{i:05d}-" + "n" * 247 for i in range(cfg.agent_shard_nodes)]  # 253 chars
    ds = build.build_daemonset(BODY, spec, nodes, cfg, 0.0, shard=3)
    size = len(json.dumps(ds))
    assert 150 * KB < size < 256 * KB, size
    assert ds["metadata"]["name"] == "kubeprof-s-agent-3"
    assert ds["spec"]["selector"]["matchLabels"]["kubeprof.dev/agent-shard"] == "3"
    assert ds["spec"]["template"]["metadata"]["labels"]["kubeprof.dev/agent-shard"] == "3"


@pytest.fixture
def env(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path}/k.db")
    kube = FakeKube()
    clock = [T0]
    ctx = Context(
        kube,
        store.engine,
        Registry(),
        OperatorConfig(database_url="", drain_s=5, agent_shard_nodes=2),
        clock=lambda: clock[0],
    )
    yield ctx, kube, clock
    store.close()


def _pinned(kube: FakeKube) -> dict[str, list[str]]:
    return {
        k.removeprefix("daemonsets/"): [
            t["matchFields"][0]["values"][0]
            for t in o["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
        ]
        for k, o in kube.objects.items()
        if k.startswith("daemonsets/")
    }


def test_session_shards_follow_nodes_and_every_shard_goes_at_the_end(env):
    ctx, kube, clock = env
    body = copy.deepcopy(BODY)
    kube.pods = [_pod(f"p{i}", f"n{i}", f"u{i}") for i in range(5)]
    st = reconcile(ctx, body)
    body["status"] = st
    assert _pinned(kube) == {
        "kubeprof-s-agent": ["n0", "n1"],
        "kubeprof-s-agent-1": ["n2", "n3"],
        "kubeprof-s-agent-2": ["n4"],
    }
    assert st["agents"]["daemonSets"] == 3 and st["nodes"] == 5

    # The agent pods the shards made, four of five Ready: the status counts ready pods of
    # the session against the pinned nodes, whatever the DaemonSets' own counters say.
    targets = list(kube.pods)
    for i, node in enumerate(n for nodes in _pinned(kube).values() for n in nodes):
        kube.pods.append(
            {
                "metadata": {
                    "name": f"agent-{node}",
                    "uid": f"a{i}",
                    "labels": {"kubeprof.dev/session": "s", "app.kubernetes.io/component": "agent"},
                },
                "spec": {"nodeName": node},
                "status": {
                    "phase": "Running",
                    "conditions": [
                        {"type": "Ready", "status": "True" if node != "n4" else "False"}
                    ],
                },
            }
        )
    st = reconcile(ctx, body)
    body["status"] = st
    assert st["agents"] == {"ready": 4, "expected": 5, "daemonSets": 3}
    assert st["agentsReady"] == "4/5"
    kube.pods = targets

    # n1 and n4 go, n5 comes: n0, n2, n3 stay where they were; shard 2 is deleted.
    kube.pods = [p for p in kube.pods if p["spec"]["nodeName"] not in ("n1", "n4")]
    kube.pods.append(_pod("p5", "n5", "u5"))
    body["status"] = reconcile(ctx, body)
    assert _pinned(kube) == {"kubeprof-s-agent": ["n0", "n5"], "kubeprof-s-agent-1": ["n2", "n3"]}
    assert "kubeprof-s-agent-2" in kube.deleted

    clock[0] += 61  # past the end: agents stay up to flush while draining
    body["status"] = reconcile(ctx, body)
    assert body["status"]["phase"] == "Aggregating" and len(_pinned(kube)) == 2
    clock[0] += 6  # past the drain: aggregated, every shard removed
    body["status"] = reconcile(ctx, body)
    assert body["status"]["phase"] == "Completed"
    assert _pinned(kube) == {}
    assert {"kubeprof-s-agent", "kubeprof-s-agent-1"} <= set(kube.deleted)
