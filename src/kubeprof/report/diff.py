"""The differential flame graph of two sessions: one merged tree, coloured by change.

Frames merge by label across both sessions (no process or pid frames: pids differ from
run to run). A frame's width is its time in both sessions together, so what disappeared
stays visible; its colour is the change of its *share* of each session's total (sessions
differ in length): red got slower (a larger share of the new session), blue faster.
"""

from __future__ import annotations

from collections.abc import Sequence

from kubeprof.report.flamegraph import tree_payload
from kubeprof.report.tree import CallTree, build_tree
from kubeprof.report.views import view_info
from kubeprof.reportdata import WeightedStack


def base_values(tree: CallTree, base: Sequence[WeightedStack]) -> list[int]:
    """value_ns of `base` stacks at each node of `tree` (built from a superset of them)."""
    name_ids = {(n, k): i for i, (n, k) in enumerate(zip(tree.names, tree.name_kinds, strict=True))}
    child: dict[tuple[int, int], int] = {}
    open_nodes: list[int] = []
    for i, depth in enumerate(tree.node_depth):
        del open_nodes[depth:]
        if open_nodes:
            child[(open_nodes[-1], tree.node_name[i])] = i
        open_nodes.append(i)
    out = [0] * len(tree)
    for ws in base:
        node = 0
        out[0] += ws.value_ns
        for frame in ws.stack:
            node = child[(node, name_ids[(frame.label(), frame.kind.value)])]
            out[node] += ws.value_ns
    return out


def diff_payload(
    base: Sequence[WeightedStack],
    new: Sequence[WeightedStack],
    *,
    view: str,
    base_name: str,
    new_name: str,
) -> dict[str, object]:
    """The flame graph page's view payload with `base` per node and both totals."""
    tree = build_tree([*base, *new], group="none")
    before = base_values(tree, base)
    payload = tree_payload(
        tree,
        title=f"{view_info(view).title}: {base_name} → {new_name}",
        unit=view_info(view).count_unit,
    )
    scale = int(payload["scale"])  # type: ignore[call-overload]
    payload["base"] = [v / scale for v in before]
    payload["baseTotal"] = sum(ws.value_ns for ws in base) / scale
    payload["newTotal"] = sum(ws.value_ns for ws in new) / scale
    payload["sessions"] = [base_name, new_name]
    return payload
