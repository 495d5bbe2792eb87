"""The web UI's answer for a flame graph: one view's stacks as the HTML report's tree
(flamegraph.js), with the colours and the graph's own top functions.

Here, not in the UI, because `reporting` builds the same answer for a session's whole
session when it stores the view it comes from (`storage.prepared_flames`): the UI's
first graph is then a few kB read back, byte for byte what the UI would have built.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubeprof.report.flamegraph import KINDS, PALETTE, tree_payload
from kubeprof.report.text import function_label, function_times
from kubeprof.report.tree import build_tree
from kubeprof.report.views import view_info
from kubeprof.reportdata import WeightedStack


def top_functions(stacks: Sequence[WeightedStack], n: int = 15) -> list[dict[str, Any]]:
    """Functions by self time (what the text report's table shows), with total time."""
    self_ns, total_ns = function_times(stacks)
    whole = sum(ws.value_ns for ws in stacks) or 1
    ranked = sorted(self_ns, key=lambda k: (-self_ns[k], str(k)))[:n]
    return [
        {
            "function": function_label(k),
            "kind": k[0],
            "selfNs": self_ns[k],
            "totalNs": total_ns[k],
            "selfShare": self_ns[k] / whole,
        }
        for k in ranked
    ]


def flame_page(view: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """What the flame graph page draws: one view's payload, the colours and `extra`."""
    return {"kinds": KINDS, "palette": PALETTE, "initial": view, "views": {view: payload}, **extra}


def stacks_page(
    view: str, stacks: Sequence[WeightedStack], *, span: list[float] | None = None
) -> dict[str, Any]:
    """One view's flame graph of `stacks`, with the top functions of exactly this graph
    (`span`: the seconds it covers when narrowed, the answer's `range`)."""
    tree = build_tree(stacks, group="process")
    info = view_info(view)
    payload = tree_payload(tree, title=info.title, unit=info.count_unit)
    return flame_page(view, payload, range=span, stacks=len(stacks), top=top_functions(stacks))
