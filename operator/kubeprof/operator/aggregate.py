"""Session-end aggregation: samples, top CPU stacks and GPU idle ratio per session/node/pod.

Reads the stored records of one session, writes one row per scope to `session_aggregates`
(an upsert: running it twice after a restart gives the same rows) and returns a summary
small enough for the CR's `.status`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.engine import Connection

from kubeprof.analysis import gpu_idle as gpu_idle_analysis
from kubeprof.model import FrameKind, GpuActivity, Stack
from kubeprof.storage.bulk import dialect_insert
from kubeprof.storage.intern import load_stacks
from kubeprof.storage.models import (
    GpuActivityRow,
    GpuMetricRow,
    ProcessRow,
    SampleRow,
    SessionAggregateRow,
)

UTIL_METRIC = "gpu_util_pct"  # NVML device utilization, percent of time a kernel ran
LABEL_MAX = 120  # characters of one stack label in .status


@dataclass
class Scope:
    """Results of one node or pod."""

    samples: int = 0
    gpu_idle: float | None = None
    top_stack: str = ""


@dataclass
class GpuIdle:
    """Idle ratio of one GPU, and the pods that used it."""

    node: str
    device: int
    idle: float
    pods: list[str] = field(default_factory=list)


@dataclass
class Summary:
    """Everything aggregated for one session."""

    samples: int = 0
    processes: int = 0
    gpu_idle: float | None = None
    top_stacks: list[tuple[str, int]] = field(default_factory=list)  # (label, samples)
    nodes: dict[str, Scope] = field(default_factory=dict)
    pods: dict[str, Scope] = field(default_factory=dict)  # by pod uid
    gpus: list[GpuIdle] = field(default_factory=list)

    def top_finding(self) -> str:
        """One line for the printer column."""
        cpu = ""
        if self.top_stacks and self.samples:
            label, n = self.top_stacks[0]
            cpu = f"{n / self.samples:.0%} of CPU samples in {label}"
        if self.gpu_idle is not None and self.gpu_idle >= 0.5:
            gpu = f"GPU idle {self.gpu_idle:.0%}"
            return (f"{gpu}; {cpu}" if cpu else gpu)[:LABEL_MAX]
        return cpu[:LABEL_MAX] or "no samples collected"


def stack_label(stack: Stack) -> str:
    """Short text for a stack: the innermost Python frames if any, else the leaf frames."""
    py = [f for f in stack if f.kind is FrameKind.PYTHON]
    frames = py[-2:] if py else list(stack[-2:])
    return " <- ".join(f.label() for f in reversed(frames))[:LABEL_MAX] or "[empty]"


def _pid_pods(conn: Connection, session_id: int) -> dict[tuple[str, int], str]:
    q = select(ProcessRow.node, ProcessRow.pid, ProcessRow.pod_uid).where(
        ProcessRow.session_id == session_id)
    return {(r.node, r.pid): r.pod_uid for r in conn.execute(q) if r.pod_uid}


def _top_stacks(conn: Connection, session_id: int, limit: int, *conds: ColumnElement[bool],
                ) -> list[tuple[Stack, int]]:
    n = func.count().label("n")
    q = (select(SampleRow.stack_id, n).where(SampleRow.session_id == session_id, *conds)
         .group_by(SampleRow.stack_id).order_by(n.desc(), SampleRow.stack_id).limit(limit))
    rows = conn.execute(q).all()
    stacks = load_stacks(conn, (r.stack_id for r in rows))
    return [(stacks[r.stack_id], int(r.n)) for r in rows]


def gpu_idle(conn: Connection, session_id: int, pid_pods: Mapping[tuple[str, int], str],
             ) -> list[GpuIdle]:
    """Idle ratio per (node, GPU): NVML utilization when sampled, else CUPTI kernel spans."""
    out: dict[tuple[str, int], GpuIdle] = {}
    q = (select(GpuMetricRow.node, GpuMetricRow.device, func.avg(GpuMetricRow.value))
         .where(GpuMetricRow.session_id == session_id, GpuMetricRow.metric == UTIL_METRIC,
                GpuMetricRow.pid == 0)
         .group_by(GpuMetricRow.node, GpuMetricRow.device))
    for node, dev, avg in conn.execute(q):
        out[(node, dev)] = GpuIdle(node, int(dev), min(1.0, max(0.0, 1 - float(avg) / 100)))
    activities: dict[str, list[GpuActivity]] = {}
    users: dict[tuple[str, int], set[str]] = {}
    q2 = select(GpuActivityRow.node, GpuActivityRow.kind, GpuActivityRow.device,
                GpuActivityRow.pid, GpuActivityRow.start_ns, GpuActivityRow.end_ns).where(
        GpuActivityRow.session_id == session_id)
    for node, kind, dev, pid, s, e in conn.execute(q2):
        activities.setdefault(node, []).append(GpuActivity(kind, "", s, e, dev, pid, 0))
        if (node, pid) in pid_pods:
            users.setdefault((node, dev), set()).add(pid_pods[(node, pid)])
    q3 = (select(GpuMetricRow.node, GpuMetricRow.device, GpuMetricRow.pid).distinct()
          .where(GpuMetricRow.session_id == session_id, GpuMetricRow.pid != 0))
    for node, dev, pid in conn.execute(q3):
        if (node, pid) in pid_pods:
            users.setdefault((node, dev), set()).add(pid_pods[(node, pid)])
    for node, acts in activities.items():
        # Per node: GPU clocks of different nodes are not comparable. The window is the
        # node's active one (first kernel to last), as the analysis module defines it.
        start, end = min(a.start_ns for a in acts), max(a.end_ns for a in acts)
        for dev, ratio in gpu_idle_analysis.by_device(acts, start, end).items():
            out.setdefault((node, dev), GpuIdle(node, dev, ratio.idle_ratio))
    for key, g in out.items():
        g.pods = sorted(users.get(key, ()))
    return sorted(out.values(), key=lambda g: (g.node, g.device))


def aggregate(conn: Connection, session_id: int, top_n: int = 5) -> Summary:
    """Compute the summary of one session from its stored records."""
    s = Summary()
    pid_pods = _pid_pods(conn, session_id)
    s.processes = len(pid_pods)
    q = (select(SampleRow.node, SampleRow.pid, func.count())
         .where(SampleRow.session_id == session_id).group_by(SampleRow.node, SampleRow.pid))
    for node, pid, n in conn.execute(q):
        s.samples += n
        s.nodes.setdefault(node, Scope()).samples += n
        uid = pid_pods.get((node, pid), "")
        if uid:
            s.pods.setdefault(uid, Scope()).samples += n
    s.top_stacks = [(stack_label(st), n) for st, n in _top_stacks(conn, session_id, top_n)]
    for node, scope in s.nodes.items():
        top = _top_stacks(conn, session_id, 1, SampleRow.node == node)
        scope.top_stack = stack_label(top[0][0]) if top else ""
    for uid, scope in s.pods.items():
        pids = [(n, p) for (n, p), u in pid_pods.items() if u == uid]
        cond = _pid_filter(pids)
        top = _top_stacks(conn, session_id, 1, cond) if pids else []
        scope.top_stack = stack_label(top[0][0]) if top else ""
    s.gpus = gpu_idle(conn, session_id, pid_pods)
    if s.gpus:
        s.gpu_idle = sum(g.idle for g in s.gpus) / len(s.gpus)
        for node in {g.node for g in s.gpus}:
            gs = [g.idle for g in s.gpus if g.node == node]
            s.nodes.setdefault(node, Scope()).gpu_idle = sum(gs) / len(gs)
        for uid in {u for g in s.gpus for u in g.pods}:
            gs = [g.idle for g in s.gpus if uid in g.pods]
            s.pods.setdefault(uid, Scope()).gpu_idle = sum(gs) / len(gs)
    return s


def _pid_filter(pids: list[tuple[str, int]]) -> ColumnElement[bool]:
    return or_(*(and_(SampleRow.node == n, SampleRow.pid == p) for n, p in pids))


def store(conn: Connection, session_id: int, s: Summary) -> None:
    """Upsert the session, node and pod rows of `s` into session_aggregates."""
    now = datetime.now(UTC)
    rows = [{"session_id": session_id, "scope": "session", "key": "", "samples": s.samples,
             "gpu_idle_ratio": s.gpu_idle, "computed_at": now,
             "detail": json.dumps({"top_stacks": s.top_stacks, "processes": s.processes,
                                   "gpus": [g.__dict__ for g in s.gpus]})}]
    rows += [{"session_id": session_id, "scope": "node", "key": node, "samples": sc.samples,
              "gpu_idle_ratio": sc.gpu_idle, "computed_at": now,
              "detail": json.dumps({"top_stack": sc.top_stack})} for node, sc in s.nodes.items()]
    rows += [{"session_id": session_id, "scope": "pod", "key": uid, "samples": sc.samples,
              "gpu_idle_ratio": sc.gpu_idle, "computed_at": now,
              "detail": json.dumps({"top_stack": sc.top_stack})} for uid, sc in s.pods.items()]
    ins = dialect_insert(conn, SessionAggregateRow)
    stmt = ins.on_conflict_do_update(
        index_elements=["session_id", "scope", "key"],
        set_={k: getattr(ins.excluded, k)
              for k in ("samples", "gpu_idle_ratio", "detail", "computed_at")})
    conn.execute(stmt, rows)


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:.0%}"


def status_summary(s: Summary, pod_names: Mapping[str, str], top_n: int = 5) -> dict:
    """The compact `.status` part: counts, top stacks as short strings, top nodes/pods."""
    nodes = sorted(s.nodes.items(), key=lambda kv: -kv[1].samples)[:top_n]
    pods = sorted(s.pods.items(), key=lambda kv: -kv[1].samples)[:top_n]
    out: dict = {
        "samples": s.samples,
        "processes": s.processes,
        "gpuIdle": _pct(s.gpu_idle),
        "topFinding": s.top_finding(),
        "topStacks": [f"{n} {label}" for label, n in s.top_stacks[:top_n]],
        "summary": {
            "nodes": [{"name": n, "samples": sc.samples, "gpuIdle": _pct(sc.gpu_idle)}
                      for n, sc in nodes],
            "pods": [{"name": pod_names.get(uid, uid), "samples": sc.samples,
                      "gpuIdle": _pct(sc.gpu_idle), "topStack": sc.top_stack}
                     for uid, sc in pods],
        },
    }
    return out
