"""The UI's JSON API: plain functions from a database connection to JSON-ready dicts.

Sessions are addressed as (namespace, name): a cluster session by its ProfilingSession's
namespace and name (the newest when a name was reused), a local `kubeprof record` session
as namespace ``local``. Flame graphs read the pre-counted `stack_counts` (fast at any
session size); the summary runs the report's analysis once per finished session and is
cached. Nothing secret is stored with a session, and meta keys that look like one are
dropped anyway before anything reaches a browser.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from kubeprof.analysis.gpu_summary import gpu_profile_stacks
from kubeprof.model import FrameKind
from kubeprof.report.analysis_html import findings_html
from kubeprof.report.diff import diff_payload
from kubeprof.report.evidence import targets, title
from kubeprof.report.flamegraph import KINDS, PALETTE, tree_payload
from kubeprof.report.formats import gpu_off_reason
from kubeprof.report.gpu import render_gpu_html
from kubeprof.report.header import items, process_names
from kubeprof.report.text import function_label, function_times
from kubeprof.report.tree import build_tree
from kubeprof.report.views import available_views, view_info
from kubeprof.reportdata import Profile, Report, WeightedStack
from kubeprof.reporting import build_report
from kubeprof.storage import queries as q
from kubeprof.storage.models import ProcessRow, SessionAggregateRow, StackCountRow
from kubeprof.storage.stack_counts import BUCKET_NS, TOTAL_BUCKET

LOCAL = "local"  # the namespace of sessions recorded with `kubeprof record`
_SECRET = re.compile(r"token|secret|passw|credential|authorization", re.I)
_STORE_NAME = re.compile(r"^(?P<ns>[^/]+)/(?P<name>.+)@(?P<uid>[0-9a-f-]*)$")


class ApiError(LookupError):
    """A request the API cannot answer: `status` is the HTTP status, the message says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def ref_of(info: q.SessionInfo) -> tuple[str, str]:
    """(namespace, name) of a stored session: cluster rows are "ns/name@uid"."""
    m = _STORE_NAME.match(info.name) if info.kind == "cluster" else None
    return (m["ns"], m["name"]) if m else (LOCAL, info.name)


def find(conn: Connection, namespace: str, name: str) -> q.SessionInfo:
    """The session (namespace, name); the newest one when a cluster name was reused."""
    found = [s for s in q.list_sessions(conn, counts=False) if ref_of(s) == (namespace, name)]
    if not found:
        raise ApiError(404, f"no session {namespace}/{name}; GET /api/v1/sessions lists them")
    return found[-1]


def _safe_meta(meta: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in meta.items() if not _SECRET.search(k)}


# -- sessions list -----------------------------------------------------------------------


def _aggregates(conn: Connection) -> dict[int, tuple[float | None, str]]:
    """session id -> (GPU idle, top finding) from the operator's session-end rows."""
    out: dict[int, tuple[float | None, str]] = {}
    t = SessionAggregateRow
    rows = conn.execute(
        select(t.session_id, t.gpu_idle_ratio, t.detail).where(t.scope == "session")
    )
    for sid, idle, detail in rows:
        d = json.loads(detail or "{}")
        findings = d.get("findings") or []
        out[sid] = (idle, d.get("top_finding") or (findings[0]["message"] if findings else ""))
    return out


def _pod_counts(conn: Connection) -> dict[int, int]:
    """session id -> pods whose processes were seen (known while the session still runs)."""
    q2 = (
        select(ProcessRow.session_id, func.count(ProcessRow.pod_uid.distinct()))
        .where(ProcessRow.pod_uid != "")
        .group_by(ProcessRow.session_id)
    )
    return {int(sid): int(n) for sid, n in conn.execute(q2)}


def _nodes_and_samples(conn: Connection) -> dict[int, tuple[int, int]]:
    """session id -> (nodes with CPU samples, CPU samples), from the session totals."""
    t = StackCountRow
    q2 = (
        select(t.session_id, func.count(t.node.distinct()), func.sum(t.samples))
        .where(t.bucket == TOTAL_BUCKET)
        .group_by(t.session_id)
    )
    return {int(s): (int(n), int(c or 0)) for s, n, c in conn.execute(q2)}


@dataclass
class Cache:
    """Summaries of finished sessions, computed once (the analysis reads every sample)."""

    summaries: dict[tuple[int, str, int], dict[str, Any]]
    lock: threading.Lock

    @classmethod
    def new(cls) -> Cache:
        return cls({}, threading.Lock())

    def get(self, info: q.SessionInfo) -> dict[str, Any] | None:
        with self.lock:
            return self.summaries.get((info.id, info.status, info.end_ns))

    def put(self, info: q.SessionInfo, value: dict[str, Any]) -> None:
        if info.status == "running":
            return
        with self.lock:
            self.summaries[(info.id, info.status, info.end_ns)] = value


def sessions(conn: Connection, cache: Cache | None = None) -> dict[str, Any]:
    """Every session, newest first, with what the list page shows."""
    aggs = _aggregates(conn)
    pods = _pod_counts(conn)
    counts = _nodes_and_samples(conn)
    now = datetime.now(UTC)
    out = []
    for s in reversed(q.list_sessions(conn, counts=False)):
        ns, name = ref_of(s)
        idle, top = aggs.get(s.id, (None, ""))
        cached = cache.get(s) if cache is not None else None
        if cached is not None and not top:
            idle, top = cached["gpuIdle"], cached["topFinding"]
        started = s.started_at if s.started_at.tzinfo else s.started_at.replace(tzinfo=UTC)
        nodes, samples = counts.get(s.id, (0, 0))
        out.append(
            {
                "namespace": ns,
                "name": name,
                "kind": s.kind,
                "phase": s.status,
                "nodes": nodes,
                "pods": pods.get(s.id, 0),
                "samples": samples,
                "gpuIdle": idle,
                "topFinding": top,
                "startedAt": started.isoformat(),
                "ageSeconds": int((now - started).total_seconds()),
                "durationSeconds": round(s.duration_s, 3),
            }
        )
    return {"sessions": out}


# -- one session ---------------------------------------------------------------------------


def _pods(conn: Connection, info: q.SessionInfo) -> list[dict[str, str]]:
    names = {k.removeprefix("pod:"): v for k, v in info.meta.items() if k.startswith("pod:")}
    uids = sorted(set(q.pid_pods(conn, info.id).values()))
    return [{"uid": u, "name": names.get(u, u)} for u in uids]


def _gpus(conn: Connection, info: q.SessionInfo) -> list[dict[str, Any]]:
    """The GPUs the session's processes used (kernel records or NVML per-process rows)."""
    seen = sorted({(node, dev) for node, dev, _ in q.gpu_users(conn, info.id)})
    return [
        {"id": f"{node}:{dev}" if node else str(dev), "node": node, "device": dev}
        for node, dev in seen
    ]


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


def summary(
    conn: Connection,
    info: q.SessionInfo,
    cache: Cache | None = None,
) -> dict[str, Any]:
    """The session page: header, findings (as data and as the report's own HTML), GPU
    section, top functions and kernels, and what the flame graph can be narrowed to."""
    cached = cache.get(info) if cache is not None else None
    if cached is not None:
        return cached
    profile = q.load_profile(conn, info)
    profile = Profile(
        profile.session,
        profile.hz,
        profile.duration_s,
        profile.cpu,
        profile.gpu,
        _safe_meta(profile.meta),
    )
    acts = q.gpu_activities(conn, info.id)
    metrics = q.gpu_metrics(conn, info.id)
    cpu = q.sample_columns(conn, info)
    names = {pid: name for (_, pid), name in q.process_names(conn, info.id).items()}
    report = build_report(
        profile, acts, metrics, info.start_ns, info.end_ns, cpu, process_names=names
    )
    out = _summary_of(report, info)
    out["pods"] = _pods(conn, info)
    out["gpus"] = _gpus(conn, info)
    if cache is not None:
        cache.put(info, out)
    return out


def _summary_of(report: Report, info: q.SessionInfo) -> dict[str, Any]:
    a = report.analysis
    ns, name = ref_of(info)
    findings = [
        {
            "kind": f.kind.value,
            "severity": f.severity.value,
            "title": title(f.kind),
            "message": f.message,
            "frames": [{"view": t.view, "search": t.search} for t in targets(f)],
            "gainSeconds": f.gain.saved_ns / 1e9 if f.gain is not None else None,
        }
        for f in (a.findings if a is not None else ())
    ]
    gpu_idle = a.headline.ratio if a is not None else None
    kernels = [
        {
            "function": k["function"].removesuffix("_[gpu]"),
            "selfNs": k["selfNs"],
            "selfShare": k["selfShare"],
        }
        for k in top_functions(report.profile.gpu)
        if k["kind"] == FrameKind.GPU.value
    ]
    timeline = None
    if a is not None and a.timeline.busy_ns and a.timeline.devices:
        tl = a.timeline
        timeline = {
            "bucketSeconds": tl.bucket_ns / 1e9,
            "startSeconds": (tl.start_ns - info.start_ns) / 1e9 if info.start_ns else 0,
            "busy": [round(b / (tl.bucket_ns * tl.devices), 4) for b in tl.busy_ns],
        }
    return {
        "namespace": ns,
        "name": name,
        "phase": info.status,
        "durationSeconds": round(info.duration_s, 3),
        "header": [[k, v] for k, v in items(report)],
        "findings": findings,
        "gpuIdle": gpu_idle,
        "topFinding": findings[0]["message"] if findings else "",
        "views": available_views(report.profile),
        "topFunctions": top_functions(report.profile.cpu),
        "topKernels": kernels,
        "timeline": timeline,
        "bucketSeconds": BUCKET_NS / 1e9,
        "html": {
            "findings": findings_html(a) if a is not None else "",
            "gpu": render_gpu_html(
                report.gpu, off_reason=gpu_off_reason(report), names=process_names(report.profile)
            )
            if report.gpu is not None
            else "",
        },
    }


# -- flame graphs ------------------------------------------------------------------------


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
        names = {k.removeprefix("pod:"): v for k, v in info.meta.items() if k.startswith("pod:")}
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


def view_stacks(
    conn: Connection,
    info: q.SessionInfo,
    view: str,
    *,
    from_s: float | None = None,
    to_s: float | None = None,
    pod: str = "",
    gpu: str = "",
) -> tuple[WeightedStack, ...]:
    """The stacks of one view of a session, narrowed to a time range, pod and GPU."""
    if view not in ("cpu", "gpu"):
        raise ApiError(400, f"view={view!r}: expected cpu or gpu")
    pids = _pids_for(conn, info, pod, gpu)
    if view == "cpu":
        return q.cpu_stacks(conn, info, buckets=buckets_for(info, from_s, to_s), pids=pids)
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
    return gpu_profile_stacks(keep, names)


def flamegraph(
    conn: Connection,
    info: q.SessionInfo,
    *,
    view: str = "cpu",
    from_s: float | None = None,
    to_s: float | None = None,
    pod: str = "",
    gpu: str = "",
) -> dict[str, Any]:
    """One view's flame graph, in the HTML report's own data format (flamegraph.js)."""
    stacks = view_stacks(conn, info, view, from_s=from_s, to_s=to_s, pod=pod, gpu=gpu)
    tree = build_tree(stacks, group="process")
    payload = tree_payload(tree, title=view_info(view).title, unit=view_info(view).count_unit)
    b = buckets_for(info, from_s, to_s) if view == "cpu" else None
    rng = None
    if b is not None:
        rng = [
            max(0.0, (b[0] * BUCKET_NS - info.start_ns) / 1e9),
            ((b[1] + 1) * BUCKET_NS - info.start_ns) / 1e9,
        ]
    return {
        "kinds": KINDS,
        "palette": PALETTE,
        "initial": view,
        "views": {view: payload},
        "range": rng,
        "stacks": len(stacks),
        "top": top_functions(stacks),  # of exactly this graph: per pod, GPU and time range
    }


def diff(
    conn: Connection,
    base: q.SessionInfo,
    new: q.SessionInfo,
    *,
    view: str = "cpu",
) -> dict[str, Any]:
    """The differential flame graph of `base` -> `new` (flamegraph.js colours by change)."""
    b = view_stacks(conn, base, view)
    n = view_stacks(conn, new, view)
    bn, nn = "/".join(ref_of(base)), "/".join(ref_of(new))
    payload = diff_payload(b, n, view=view, base_name=bn, new_name=nn)
    return {
        "kinds": KINDS,
        "palette": PALETTE,
        "initial": view,
        "views": {view: payload},
        "base": bn,
        "new": nn,
    }
