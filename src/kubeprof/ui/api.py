"""The UI's JSON API in one place: what each route answers, as JSON-ready dicts.

A facade over the modules that answer (`listing`, `summary`, `flames`, `comparison`,
`refs`), so the routes, the bench and the tests name one module; every function takes an
open connection.
"""

from __future__ import annotations

from kubeprof.report.flame_page import top_functions
from kubeprof.ui.comparison import Pair, check_sort, diff, diff_numbers, prepare
from kubeprof.ui.flames import buckets_for, check_view, flamegraph, view_stacks
from kubeprof.ui.listing import sessions
from kubeprof.ui.refs import LOCAL, ApiError, find, ref_of
from kubeprof.ui.summary import PAGE, Cache, Prepared, summary

__all__ = [
    "LOCAL",
    "PAGE",
    "ApiError",
    "Cache",
    "Pair",
    "Prepared",
    "buckets_for",
    "check_sort",
    "check_view",
    "diff",
    "diff_numbers",
    "find",
    "flamegraph",
    "prepare",
    "ref_of",
    "sessions",
    "summary",
    "top_functions",
    "view_stacks",
]
