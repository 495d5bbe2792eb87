"""Session-end aggregation: fetch a session's records, analyse them, store and summarise.

Orchestration only: the rows come from `kubeprof.storage.queries` (the queries `kubeprof
report` uses), the numbers from `kubeprof.analysis` (GPU idle from `gpu_idle`, the one
definition), and the results go to `session_aggregates` through an upsert (running it twice
after a restart gives the same rows). `status_summary` makes the CR's compact `.status`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import Connection

from kubeprof.analysis import findings as fa
from kubeprof.analysis import gpu_idle
from kubeprof.analysis import session_summary as ss
from kubeprof.analysis.gpu_trace import WORK_KINDS
from kubeprof.analysis.pod_idle import pods_idle
from kubeprof.analysis.session_summary import Summary
from kubeprof.model import GpuActivity, GpuMetricSample
from kubeprof.storage import queries as q
from kubeprof.storage.store import upsert_session_aggregates

__all__ = ["Summary", "aggregate", "status_summary", "store"]


def aggregate(conn: Connection, session_id: int, top_n: int = 5) -> Summary:
    """Compute the summary of one session from its stored records."""
    pid_pods = q.pid_pods(conn, session_id)
    s = ss.samples_by_scope(q.sample_counts(conn, session_id), pid_pods)
    s.top_stacks = [(ss.stack_label(st), n) for st, n in q.top_stacks(conn, session_id, top_n)]
    for node, scope in s.nodes.items():
        top = q.top_stacks(conn, session_id, 1, node=node)
        scope.top_stack = ss.stack_label(top[0][0]) if top else ""
    pod_tops = q.top_stack_per_pod(conn, session_id)
    for uid, scope in s.pods.items():
        pod_top = pod_tops.get(uid)
        scope.top_stack = ss.stack_label(pod_top[0]) if pod_top else ""
    activities = q.gpu_activities_by_node(conn, session_id, stacks=True)
    all_metrics = q.gpu_metrics_by_node(conn, session_id)
    headlines: dict[str, gpu_idle.IdleFigure | None] = {}
    gpus: list[ss.GpuIdle] = []
    for node in sorted(activities.keys() | all_metrics.keys()):
        acts, metrics = activities.get(node, []), all_metrics.get(node, [])
        util = [m for m in metrics if m.metric == gpu_idle.UTIL_METRIC]
        headlines[node] = gpu_idle.headline(acts, util)
        gpus += ss.node_gpus(node, acts, util)
        s.findings += [(node, f) for f in node_findings(acts, metrics)]
    s.findings.sort(key=lambda nf: fa.rank(nf[1]))
    users = q.gpu_users(conn, session_id)
    ss.add_gpu_idle(s, headlines, gpus, users, pid_pods)
    pods = sorted(set(pid_pods.values()) | s.pods.keys())
    ss.add_pod_idle(s, pods_idle(pid_pods, activities, all_metrics, users, pods))
    return s


def node_findings(
    activities: list[GpuActivity],
    metrics: list[GpuMetricSample],
) -> tuple[fa.Finding, ...]:
    """The verdicts on one node's GPU records (the same analysis `kubeprof report` runs).

    Without device work (kernels, copies, memsets: no tracer in the pods yet) there is
    nothing to judge: none.
    """
    work = [a for a in activities if a.kind in WORK_KINDS and a.device >= 0]
    if not work:
        return ()
    window = fa.Window(min(a.start_ns for a in work), max(a.end_ns for a in work))
    return fa.analyse(activities, metrics, None, window).findings


def gpu_pods(conn: Connection, session_id: int) -> dict[tuple[str, int], list[str]]:
    """(node, GPU) -> UIDs of the pods whose processes used that GPU."""
    pid_pods = q.pid_pods(conn, session_id)
    out: dict[tuple[str, int], set[str]] = {}
    for node, dev, pid in q.gpu_users(conn, session_id):
        uid = pid_pods.get((node, pid))
        if uid:
            out.setdefault((node, dev), set()).add(uid)
    return {k: sorted(v) for k, v in out.items()}


def recent_gpu_idle(
    conn: Connection,
    session_id: int,
    window_s: float,
) -> dict[str, dict[int, gpu_idle.IdleFigure]]:
    """Per node and GPU, idle over the last `window_s` of that node's records ("idle now")."""
    window_ns = int(window_s * 1e9)
    out = {}
    for node, now_ns in q.latest_gpu_ns(conn, session_id).items():
        acts, util = q.recent_gpu_records(conn, session_id, node, now_ns - window_ns)
        out[node] = gpu_idle.recent(acts, util, window_ns, now_ns)
    return out


def store(conn: Connection, session_id: int, s: Summary) -> None:
    """Upsert the session, node and pod rows of `s` into session_aggregates."""
    now = datetime.now(UTC)
    rows = [
        {
            "session_id": session_id,
            "scope": "session",
            "key": "",
            "samples": s.samples,
            "gpu_idle_ratio": s.gpu_idle,
            "computed_at": now,
            "detail": json.dumps(
                {
                    "top_stacks": s.top_stacks,
                    "processes": s.processes,
                    "top_finding": s.top_finding(),  # the web UI's list
                    "gpu_idle_source": s.gpu_idle_source,
                    "findings": [finding_status(n, f) for n, f in s.findings],
                    "gpus": [g.__dict__ for g in s.gpus],
                }
            ),
        }
    ]
    rows += [
        {
            "session_id": session_id,
            "scope": "node",
            "key": node,
            "samples": sc.samples,
            "gpu_idle_ratio": sc.gpu_idle,
            "computed_at": now,
            "detail": json.dumps({"top_stack": sc.top_stack}),
        }
        for node, sc in s.nodes.items()
    ]
    rows += [
        {
            "session_id": session_id,
            "scope": "pod",
            "key": uid,
            "samples": sc.samples,
            "gpu_idle_ratio": sc.gpu_idle,
            "computed_at": now,
            "detail": json.dumps(
                {
                    "top_stack": sc.top_stack,
                    "gpu_idle_source": sc.gpu_idle_source,
                    "gpu_idle_missing": sc.gpu_idle_missing,
                }
            ),
        }
        for uid, sc in s.pods.items()
    ]
    upsert_session_aggregates(conn, rows)


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:.0%}"


def _pod_status(name: str, sc: ss.Scope) -> dict[str, Any]:
    """One pod in `.status.summary.pods`: its own GPU idle with its source, or why none."""
    out: dict[str, Any] = {
        "name": name,
        "samples": sc.samples,
        "gpuIdle": _pct(sc.gpu_idle),
        "topStack": sc.top_stack,
    }
    if sc.gpu_idle_source:
        out["gpuIdleSource"] = sc.gpu_idle_source
    if sc.gpu_idle_missing:
        out["gpuIdleMissing"] = sc.gpu_idle_missing[: ss.LABEL_MAX * 2]
    return out


def finding_status(node: str, f: fa.Finding) -> dict[str, str]:
    """A finding as `.status.findings` carries it: kind, severity, node, the one line."""
    return {
        "kind": f.kind.value,
        "severity": f.severity.value,
        "node": node,
        "message": f.message[: ss.LABEL_MAX * 2],
    }


def status_summary(
    s: Summary, pod_names: Mapping[str, str], top_n: int = 5, top_findings: int = 3
) -> dict[str, Any]:
    """The compact `.status` part: counts, top stacks as short strings, top nodes/pods."""
    nodes = sorted(s.nodes.items(), key=lambda kv: -kv[1].samples)[:top_n]
    pods = sorted(s.pods.items(), key=lambda kv: -kv[1].samples)[:top_n]
    out: dict[str, Any] = {
        "samples": s.samples,
        "processes": s.processes,
        "gpuIdle": _pct(s.gpu_idle),
        "gpuIdleSource": s.gpu_idle_source,
        "topFinding": s.top_finding(),
        "findings": [finding_status(n, f) for n, f in s.findings[:top_findings]],
        "topStacks": [f"{n} {label}" for label, n in s.top_stacks[:top_n]],
        "summary": {
            "nodes": [
                {"name": n, "samples": sc.samples, "gpuIdle": _pct(sc.gpu_idle)} for n, sc in nodes
            ],
            "pods": [_pod_status(pod_names.get(uid, uid), sc) for uid, sc in pods],
        },
    }
    return out
