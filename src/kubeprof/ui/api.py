"""The UI's JSON API in one place: what each route answers, as JSON-ready dicts.

A facade over the modules that answer (`listing`, `summary`, `flames`, `refs`), so the
routes, the bench and the tests name one module; every function takes an open connection.
"""

from __future__ import annotations

from kubeprof.ui.flames import buckets_for, diff, flamegraph, view_stacks
from kubeprof.ui.listing import sessions
from kubeprof.ui.refs import LOCAL, ApiError, find, ref_of
from kubeprof.ui.summary import Cache, summary, top_functions

__all__ = [
    "LOCAL",
    "ApiError",
    "Cache",
    "buckets_for",
    "diff",
    "find",
    "flamegraph",
    "ref_of",
    "sessions",
    "summary",
    "top_functions",
    "view_stacks",
]
