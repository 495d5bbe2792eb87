from __future__ import annotations

from kubeprof.report.tree import build_tree
from tests.support.synthetic import synthetic_profile

from .sample_profile import PERIOD


def _by_path(tree):
    """{label path: node} from the pre-order arrays."""
    out, path = {}, []
    for i in range(len(tree)):
        del path[tree.node_depth[i] :]
        path.append(tree.names[tree.node_name[i]])
        out[tuple(path)] = i
    return out


def test_merges_and_sums(profile):
    tree = build_tree(profile.cpu)
    nodes = _by_path(tree)
    assert tree.node_value[0] == 200 * PERIOD
    hot = nodes[("all", "python [10]", "main (app.py:3)", "hot (app.py:12)")]
    assert tree.node_samples[hot] == 80
    assert tree.self_value(hot) == 80 * PERIOD
    main = nodes[("all", "python [10]", "main (app.py:3)")]
    assert tree.node_samples[main] == 100 and tree.self_value(main) == 0
    assert [tree.names[tree.node_name[c]] for c in tree.children(main)] == [
        "cold (app.py:20)",
        "hot (app.py:12)",
    ]
    assert tree.name_kinds[tree.node_name[nodes[("all", "sha256sum [20]")]]] == "process"


def test_preorder_invariants():
    tree = build_tree(synthetic_profile(2000).cpu, group="thread")
    n = len(tree)
    for i in range(n):
        end = tree.node_end[i]
        assert i < end <= n
        # a subtree is the contiguous range of deeper nodes that follows it
        assert all(tree.node_depth[j] > tree.node_depth[i] for j in range(i + 1, end))
        assert end == n or tree.node_depth[end] <= tree.node_depth[i]
        assert tree.self_value(i) >= 0
    assert tree.node_value[0] == sum(ws.value_ns for ws in synthetic_profile(2000).cpu)
    leaves = sum(1 for i in range(n) if tree.node_end[i] == i + 1)
    assert leaves == 2000


def test_no_grouping():
    tree = build_tree(synthetic_profile(10).cpu, group="none", root="root")
    assert tree.names[tree.node_name[1]] == "<module> (train.py:1)"
    assert tree.names[0] == "root"
