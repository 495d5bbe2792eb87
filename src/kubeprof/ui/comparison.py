"""Two sessions compared for the diff page: `kubeprof diff -f json`'s own numbers and the
differential flame graph, both from the views `kubeprof report` prepares
(`reporting.load_report`: the same folding, the same CPU window), so the page, its flame
graph and the CLI cannot disagree.

Preparing analyses both sessions (every sample, as the CLI does); nothing is cached.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from kubeprof.report.diff import diff_payload
from kubeprof.report.diff_render import diff_dict
from kubeprof.report.flame_page import flame_page
from kubeprof.report.session_diff import diff_reports
from kubeprof.report.views import view_stacks
from kubeprof.reportdata import Report
from kubeprof.reporting import load_report
from kubeprof.storage import queries as q
from kubeprof.ui.refs import ApiError, ref_of

SORTS = ("self", "total")  # `kubeprof diff --sort`


def check_sort(by: str) -> str:
    """`by` when it is one of `kubeprof diff --sort`'s choices, else ApiError(400)."""
    if by not in SORTS:
        raise ApiError(400, f"sort={by!r}: expected self or total (as `kubeprof diff --sort`)")
    return by


@dataclass(frozen=True, slots=True)
class Pair:
    """Two sessions' prepared reports, and the names the page calls them by."""

    a: Report  # the baseline (A, before)
    b: Report  # the new session (B, after)
    a_ref: str  # "namespace/name"
    b_ref: str


def prepare(
    conn: Connection, base: q.SessionInfo, new: q.SessionInfo, *, keep_interpreter: bool = False
) -> Pair:
    """Both sessions as `kubeprof diff [--keep-interpreter]` loads them."""
    a = load_report(conn, base, keep_interpreter=keep_interpreter)
    b = load_report(conn, new, keep_interpreter=keep_interpreter)
    return Pair(a, b, "/".join(ref_of(base)), "/".join(ref_of(new)))


def diff_numbers(pair: Pair, *, by: str = "self") -> dict[str, Any]:
    """`kubeprof diff A B -f json [--sort BY]`, as a dict."""
    return diff_dict(diff_reports(pair.a, pair.b, by=check_sort(by)))


def diff(pair: Pair, *, view: str = "cpu") -> dict[str, Any]:
    """The differential flame graph of A -> B (flamegraph.js colours by change), over the
    stacks `diff_numbers` counts."""
    payload = diff_payload(
        view_stacks(pair.a.profile, view),
        view_stacks(pair.b.profile, view),
        view=view,
        base_name=pair.a_ref,
        new_name=pair.b_ref,
    )
    return flame_page(view, payload, base=pair.a_ref, new=pair.b_ref)
