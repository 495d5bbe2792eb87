"""The self-contained HTML flame graph page (canvas renderer, CPU/GPU toggle, extra sections).

Python does the heavy part once: stacks are merged into a pre-order CallTree (tree.py) and
embedded as an interned name table plus flat integer arrays, values divided by their common
divisor so they stay short. flamegraph.js draws it on a <canvas>, lays out only the zoomed
subtree and skips frames under half a pixel, which keeps 100,000+ distinct stacks fluid.
The page has no external references: CSS and JS are inlined from the package data files.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Sequence
from importlib import resources

from kubeprof.model import FrameKind
from kubeprof.report.tree import CallTree, build_tree
from kubeprof.report.views import available_views, view_info, view_stacks
from kubeprof.reportdata import Profile

KINDS = [k.value for k in FrameKind]
# (hue, saturation %, lightness %, hue spread) per frame kind; the legend and JS share it.
PALETTE: dict[str, tuple[int, int, int, int]] = {
    "python": (205, 62, 70, 30),
    "native": (28, 85, 62, 22),
    "kernel": (2, 70, 66, 12),
    "cuda_api": (280, 50, 72, 24),
    "gpu": (118, 50, 58, 30),
    "process": (0, 0, 80, 0),
}


def _asset(name: str) -> str:
    return resources.files("kubeprof.report").joinpath(name).read_text(encoding="utf-8")


_NOSCRIPT = (
    "  <noscript>The flame graph needs JavaScript; the data is embedded in this file.</noscript>\n"
)


def graph_markup(legend: str = "", noscript: str = "") -> str:
    """The flame graph's controls and canvas, with the ids flamegraph.js binds to: one
    markup for the report's page and the UI's (ui/routes.py), which both run that script."""
    parts = {"LEGEND": legend, "NOSCRIPT": noscript}
    return re.sub(r"\{\{([A-Z]+)\}\}", lambda m: parts[m.group(1)], _asset("flamegraph_graph.html"))


def tree_payload(tree: CallTree, *, title: str, unit: str) -> dict[str, object]:
    """A CallTree as the page's compact JSON: names, per-name kinds and per-node arrays."""
    scale = math.gcd(*tree.node_value) or 1
    kind_index = {k: i for i, k in enumerate(KINDS)}
    return {
        "title": title,
        "unit": unit,
        "scale": scale,  # node value * scale = nanoseconds
        "names": tree.names,
        "kinds": [kind_index[k] for k in tree.name_kinds],
        "name": tree.node_name,
        "depth": tree.node_depth,
        "value": [v // scale for v in tree.node_value],
        "samples": tree.node_samples,
    }


def embed_json(data: object) -> str:
    """JSON safe inside <script>: '<' only occurs in strings, so escape it everywhere."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")


def _header(profile: Profile, items: Sequence[tuple[str, str]] | None = None) -> str:
    """Title and the header items in words (header.py); raw meta keys are not shown."""
    from kubeprof.report.header import other_items, profile_items

    esc = html.escape
    if items is None:
        items = [*profile_items(profile), *other_items(profile)]
    stats = "".join(f"<dt>{esc(k)}</dt><dd>{esc(str(v))}</dd>" for k, v in items)
    return f"<h1>kubeprof: {esc(profile.session)}</h1>\n<dl>{stats}</dl>"


def _legend() -> str:
    return "".join(
        f'<span><i style="background:hsl({h},{s}%,{lum}%)"></i>{kind}</span>'
        for kind, (h, s, lum, _) in PALETTE.items()
    )


def _extra(sections: Sequence[tuple[str, str]], cls: str = "kp-extra") -> str:
    return "\n".join(
        f'<section class="{cls}"><h2>{html.escape(title)}</h2>\n{body}\n</section>'
        for title, body in sections
    )


def render_html(
    profile: Profile,
    *,
    view: str | None = None,
    extra_sections: Sequence[tuple[str, str]] = (),
    group: str = "process",
    top_sections: Sequence[tuple[str, str]] = (),
    header_items: Sequence[tuple[str, str]] | None = None,
) -> str:
    """The flame graph page with every view that has data; `view` picks the one shown first.

    `extra_sections` are (title, already-escaped HTML) pairs placed under the graph,
    `top_sections` the same above it (the findings panel). `header_items` are the header's
    (label, value) pairs (header.items of the report; default: what the profile says).
    `group` puts synthetic "name [pid]" (and thread) frames above the stacks.
    """
    names = available_views(profile)
    initial = view or names[0]
    if initial not in names:
        names.append(view_info(initial).name)
    payload_views = {}
    for name in names:
        info = view_info(name)
        tree = build_tree(view_stacks(profile, name), group=group)
        payload_views[name] = tree_payload(tree, title=info.title, unit=info.count_unit)
    data = {"kinds": KINDS, "palette": PALETTE, "initial": initial, "views": payload_views}
    parts = {
        "TITLE": html.escape(f"kubeprof: {profile.session}"),
        "CSS": _asset("flamegraph.css"),
        "HEADER": _header(profile, header_items),
        "TOP": _extra(top_sections, "kp-top"),
        "GRAPH": graph_markup(_legend(), _NOSCRIPT),
        "EXTRA": _extra(extra_sections),
        "DATA": embed_json(data),
        "JS": _asset("flamegraph.js"),
    }
    return re.sub(r"\{\{([A-Z]+)\}\}", lambda m: parts[m.group(1)], _asset("flamegraph.html"))
