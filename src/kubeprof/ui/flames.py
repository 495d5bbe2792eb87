"""Flame graphs over the web: one view of a session narrowed by time, pod and GPU, in the
HTML report's own data format (flamegraph.js); `comparison` draws two sessions' diff.

CPU time reads `stack_counts` (whole session, or the 1 s buckets of a time range), so the
answer costs the distinct stacks, not the samples; GPU time reads the kernel records. A
final session's whole-session graph (no range, pod or GPU) is built once and then read
back (`storage.prepared_flames`; `reporting` stores the CPU one with the page's view).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from kubeprof.analysis.gpu_summary import gpu_profile_stacks
from kubeprof.report.flame_page import stacks_page
from kubeprof.reportdata import WeightedStack
from kubeprof.reporting import fold_view
from kubeprof.storage import offcpu, prepared_flames
from kubeprof.storage import queries as q
from kubeprof.storage.stack_counts import BUCKET_NS
from kubeprof.ui.refs import ApiError, pod_names


def buckets_for(
    info: q.SessionInfo,
    from_s: float | None,
    to_s: float | None,
) -> tuple[int, int] | None:
    """The stack_counts buckets covering [from_s, to_s) seconds after the session start
    (None: the whole session, read from the session totals)."""
    if from_s is None and to_s is None:
        return None
    start = info.start_ns
    lo = start + int((from_s or 0.0) * 1e9)
    hi = start + int(to_s * 1e9) if to_s is not None else start + int(info.duration_s * 1e9)
    return (lo // BUCKET_NS, max(lo, hi - 1) // BUCKET_NS)


def _pids_for(
    conn: Connection,
    info: q.SessionInfo,
    pod: str,
    gpu: str,
) -> set[tuple[str, int]] | None:
    """(node, pid)s of a pod (UID or name) and/or of the processes that used a GPU."""
    pids: set[tuple[str, int]] | None = None
    if pod:
        names = pod_names(info.meta)
        pids = {k for k, uid in q.pid_pods(conn, info.id).items() if pod in (uid, names.get(uid))}
    if gpu:
        node, dev = _gpu_ref(gpu)
        users = {
            (n, p)
            for n, d, p in q.gpu_users(conn, info.id)
            if d == dev and (node is None or n == node)
        }
        pids = users if pids is None else pids & users
    return pids


def _gpu_ref(gpu: str) -> tuple[str | None, int]:
    node, _, dev = gpu.rpartition(":")
    if not dev.isdigit():
        raise ApiError(400, f"gpu={gpu!r}: expected a device number or NODE:DEVICE")
    return (node or None), int(dev)


def check_view(view: str) -> str:
    """`view` when the flame graphs draw it, else ApiError(400)."""
    if view not in ("cpu", "gpu", "off-cpu", "wall"):
        raise ApiError(400, f"view={view!r}: expected cpu, gpu, off-cpu or wall")
    return view


def view_stacks(
    conn: Connection,
    info: q.SessionInfo,
    view: str,
    *,
    from_s: float | None = None,
    to_s: float | None = None,
    pod: str = "",
    gpu: str = "",
    keep_interpreter: bool = False,
) -> tuple[WeightedStack, ...]:
    """The stacks of one view of a session, narrowed to a time range, pod and GPU, with
    CPython's own frames folded as `kubeprof report` folds them unless `keep_interpreter`."""
    check_view(view)
    pids = _pids_for(conn, info, pod, gpu)
    if view in ("cpu", "wall"):
        on = q.cpu_stacks(conn, info, buckets=buckets_for(info, from_s, to_s), pids=pids)
        if not keep_interpreter:
            on = fold_view(on, "cpu")
        if view == "cpu":
            return on
    if view in ("off-cpu", "wall"):
        span = None
        if from_s is not None or to_s is not None:
            end_s = to_s if to_s is not None else info.duration_s
            span = (info.start_ns + int((from_s or 0.0) * 1e9), info.start_ns + int(end_s * 1e9))
        off = offcpu.offcpu_stacks(conn, info.id, span_ns=span, pids=pids)
        return off if view == "off-cpu" else on + off
    node, dev = _gpu_ref(gpu) if gpu else (None, None)
    by_node = q.gpu_activities_by_node(conn, info.id, stacks=True)
    acts = by_node.get(node, []) if node is not None else [a for v in by_node.values() for a in v]
    lo = info.start_ns + int(from_s * 1e9) if from_s is not None else None
    hi = info.start_ns + int(to_s * 1e9) if to_s is not None else None
    keep = [
        a
        for a in acts
        if (lo is None or a.end_ns > lo)
        and (hi is None or a.start_ns < hi)
        and (dev is None or a.device == dev)
        and (pids is None or any(p == a.pid for _, p in pids))
    ]
    names = {pid: name for (_, pid), name in q.process_names(conn, info.id).items()}
    stacks = gpu_profile_stacks(keep, names)
    return stacks if keep_interpreter else fold_view(stacks, "gpu")


def flamegraph(
    conn: Connection,
    info: q.SessionInfo,
    *,
    view: str = "cpu",
    from_s: float | None = None,
    to_s: float | None = None,
    pod: str = "",
    gpu: str = "",
    keep_interpreter: bool = False,
) -> dict[str, Any]:
    """One view's flame graph, in the HTML report's own data format (flamegraph.js)."""
    whole = from_s is None and to_s is None and not pod and not gpu
    if whole:  # a final session's: built once (prepared_flames checks it is final)
        stored = prepared_flames.load(conn, info, check_view(view), keep_interpreter)
        if stored is not None:
            return stored
    stacks = view_stacks(
        conn,
        info,
        view,
        from_s=from_s,
        to_s=to_s,
        pod=pod,
        gpu=gpu,
        keep_interpreter=keep_interpreter,
    )
    b = buckets_for(info, from_s, to_s) if view == "cpu" else None
    rng = None
    if b is not None:
        rng = [
            max(0.0, (b[0] * BUCKET_NS - info.start_ns) / 1e9),
            ((b[1] + 1) * BUCKET_NS - info.start_ns) / 1e9,
        ]
    # top: of exactly this graph (per pod, GPU and time range)
    page = stacks_page(view, stacks, span=rng)
    if whole:
        prepared_flames.save(conn.engine, info, view, keep_interpreter, page)
    return page
