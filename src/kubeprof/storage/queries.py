"""Read-side queries, apart from the models: sessions, aggregated stacks, GPU records.

`kubeprof report` and the operator's session-end aggregation read through these same
functions, so both analyse the same rows.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from operator import attrgetter
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select, union
from sqlalchemy.engine import Connection

from kubeprof.analysis.cpu_samples import SampleColumns
from kubeprof.model import GpuActivity, GpuMetricSample, GpuTracerState, Stack
from kubeprof.reportdata import Profile, WeightedStack
from kubeprof.storage import offcpu
from kubeprof.storage import stack_counts as sc
from kubeprof.storage.bulk_read import driver_rows, thread_columns
from kubeprof.storage.intern import load_stacks
from kubeprof.storage.models import (
    CounterRow,
    GpuActivityRow,
    GpuMetricRow,
    GpuTracerRow,
    OffCpuSampleRow,
    ProcessRow,
    SampleRow,
    SessionRow,
    StackCountRow,
)

# A gpu_metrics row's columns carry GpuMetricSample's field names: its fields, in order.
_METRIC_FIELDS = attrgetter(*(f.name for f in fields(GpuMetricSample)))


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A stored session as `kubeprof sessions` lists it."""

    id: int
    name: str
    kind: str
    status: str
    command: str
    hz: int
    started_at: datetime
    ended_at: datetime | None
    start_ns: int
    end_ns: int
    samples: int
    gpu_activities: int
    meta: dict[str, str]

    @property
    def duration_s(self) -> float:
        if self.end_ns and self.start_ns:
            return (self.end_ns - self.start_ns) / 1e9
        if self.ended_at:
            return (self.ended_at - self.started_at).total_seconds()
        return 0.0


class SessionNotFound(LookupError):
    """No session matches what the user asked for."""


def list_sessions(conn: Connection, *, counts: bool = True) -> list[SessionInfo]:
    """All sessions, oldest first, with their sample and GPU record counts (0 without
    `counts`: counting GPU records scans them, which the web UI's list does not need)."""
    if not counts:
        return [
            _info(r._mapping, 0, 0)
            for r in conn.execute(select(SessionRow.__table__).order_by(SessionRow.id))
        ]
    # Sample counts from the pre-counted session totals, not a scan of every sample row.
    n_samples = {sid: sum(nodes.values()) for sid, nodes in sc.session_totals(conn).items()}
    n_gpu = (
        select(GpuActivityRow.session_id, func.count().label("n"))
        .group_by(GpuActivityRow.session_id)
        .subquery()
    )
    q = (
        select(SessionRow.__table__, func.coalesce(n_gpu.c.n, 0))
        .outerjoin(n_gpu, n_gpu.c.session_id == SessionRow.id)
        .order_by(SessionRow.id)
    )
    return [_info(row._mapping, n_samples.get(row.id, 0), int(row[-1])) for row in conn.execute(q)]


def _info(cols: Any, samples: int, gpu: int) -> SessionInfo:
    return SessionInfo(
        id=cols["id"],
        name=cols["name"],
        kind=cols["kind"],
        status=cols["status"],
        command=cols["command"],
        hz=cols["hz"],
        started_at=cols["started_at"],
        ended_at=cols["ended_at"],
        start_ns=cols["start_ns"],
        end_ns=cols["end_ns"],
        samples=samples,
        gpu_activities=gpu,
        meta=json.loads(cols["meta"] or "{}"),
    )


def find_session(conn: Connection, ref: str | None) -> SessionInfo:
    """A session by name or id; the newest when `ref` is None."""
    sessions = list_sessions(conn)
    if not sessions:
        raise SessionNotFound(
            "no sessions stored yet; record one with `kubeprof record -- COMMAND`"
        )
    if ref is None:
        return sessions[-1]
    return pick_session(sessions, ref)


def pick_session(sessions: Sequence[SessionInfo], ref: str) -> SessionInfo:
    """The session `ref` names among `sessions`: its name, its id, or for a cluster
    session NAMESPACE/NAME alone when that is unambiguous."""
    for s in sessions:
        if s.name == ref or str(s.id) == ref:
            return s
    # A cluster session is stored as NAMESPACE/NAME@UID8: NAMESPACE/NAME alone finds it
    # when only one ProfilingSession of that name was recorded.
    cluster = [s for s in sessions if s.kind == "cluster" and s.name.startswith(f"{ref}@")]
    if len(cluster) == 1:
        return cluster[0]
    if cluster:
        raise SessionNotFound(
            f"{ref!r} names {len(cluster)} sessions: "
            f"{', '.join(s.name for s in cluster)}; give the full name"
        )
    names = ", ".join(s.name for s in sessions[-5:])
    raise SessionNotFound(
        f"no session named {ref!r}; recent sessions: {names} (`kubeprof sessions` lists all)"
    )


def session_nodes(conn: Connection, session_id: int) -> list[str]:
    """The nodes a session holds records from, sorted ("" alone for a local session).

    Read where it is cheap: processes, the counted samples' rollup, GPU and off-CPU
    records, and only the samples past the session's counting watermark."""
    counted = (
        select(SessionRow.counted_sample_id).where(SessionRow.id == session_id).scalar_subquery()
    )
    q = union(
        select(ProcessRow.node).where(ProcessRow.session_id == session_id),
        select(StackCountRow.node).where(StackCountRow.session_id == session_id),
        select(GpuActivityRow.node).where(GpuActivityRow.session_id == session_id),
        select(OffCpuSampleRow.node).where(OffCpuSampleRow.session_id == session_id),
        select(SampleRow.node).where(SampleRow.session_id == session_id, SampleRow.id > counted),
    )
    return sorted({r[0] for r in conn.execute(q)})


def process_names(conn: Connection, session_id: int) -> dict[tuple[str, int], str]:
    """(node, pid) -> process name, for labelling stacks."""
    q = select(ProcessRow.node, ProcessRow.pid, ProcessRow.name, ProcessRow.cmdline).where(
        ProcessRow.session_id == session_id
    )
    return {(r.node, r.pid): (r.name or r.cmdline.split(" ", 1)[0]) for r in conn.execute(q)}


def cpu_stacks(
    conn: Connection,
    session: SessionInfo,
    *,
    buckets: tuple[int, int] | None = None,
    pids: Collection[tuple[str, int]] | None = None,
) -> tuple[WeightedStack, ...]:
    """CPU samples grouped by (stack, pid, tid, thread), from the pre-counted `stack_counts`
    (rows in proportion to distinct stacks, not samples); of the time buckets ``buckets``
    and the (node, pid)s ``pids`` when given."""
    rows = sc.stack_counts(conn, session.id, buckets=buckets, pids=pids)
    return _weighted(conn, session, [(n, s, p, t, th, c) for n, p, t, th, s, c in rows])


def cpu_stacks_from_samples(conn: Connection, session: SessionInfo) -> tuple[WeightedStack, ...]:
    """The same stacks counted from the sample rows (a GROUP BY over every sample): what
    `cpu_stacks` did before `stack_counts`; kept to check and benchmark it against."""
    q = (
        select(
            SampleRow.node,
            SampleRow.stack_id,
            SampleRow.pid,
            SampleRow.tid,
            SampleRow.thread,
            func.count().label("n"),
        )
        .where(SampleRow.session_id == session.id)
        .group_by(
            SampleRow.node, SampleRow.stack_id, SampleRow.pid, SampleRow.tid, SampleRow.thread
        )
    )
    return _weighted(conn, session, [tuple(r) for r in conn.execute(q)])


def _weighted(
    conn: Connection, session: SessionInfo, rows: Sequence[Sequence[Any]]
) -> tuple[WeightedStack, ...]:
    """(node, stack_id, pid, tid, thread, samples) rows as WeightedStacks."""
    stacks = load_stacks(conn, (r[1] for r in rows))
    names = process_names(conn, session.id)
    period_ns = int(1e9 / max(session.hz, 1))
    return tuple(
        WeightedStack(
            stack=stacks[stack_id],
            pid=pid,
            tid=tid,
            thread=thread,
            process=names.get((node, pid)) or str(pid),
            samples=int(n),
            value_ns=int(n) * period_ns,
        )
        for node, stack_id, pid, tid, thread, n in rows
    )


def _gpu_activity_rows(
    conn: Connection,
    session_id: int,
    *,
    stacks: bool,
    node: str | None = None,
    since_ns: int | None = None,
) -> list[tuple[str, GpuActivity]]:
    """(node, activity) in start order; launch stacks loaded only when asked for.

    ``node``/``since_ns`` narrow it to one node's records ending at or after ``since_ns``
    (its own clock), for the rolling figure.
    """
    t = GpuActivityRow.__table__
    c = t.c
    q = select(
        c.node,
        c.kind,
        c.name,
        c.start_ns,
        c.end_ns,
        c.device,
        c.pid,
        c.correlation_id,
        c.stream,
        c.demangled,
        c.grid_x,
        c.grid_y,
        c.grid_z,
        c.block_x,
        c.block_y,
        c.block_z,
        c.registers,
        c.shared_mem,
        c.bytes,
        c.stack_id,
        c.launch_ns,
        c.launch_tid,
    ).where(c.session_id == session_id)
    if node is not None:
        q = q.where(c.node == node)
    if since_ns is not None:
        q = q.where(c.end_ns >= since_ns)
    rows = driver_rows(conn, q.order_by(c.start_ns, c.id))
    by_id = load_stacks(conn, {r[19] for r in rows if r[19] is not None}) if stacks else {}
    dims: dict[tuple[int, ...], tuple[int, ...]] = {}  # one grid/block tuple per shape
    out = []
    # (node, GpuActivity's fields in order, grid and block flat, stack id, launch time, tid)
    for r in rows:
        grid, block, sid = r[10:13], r[13:16], r[19]
        stack = by_id.get(sid, ()) if sid is not None else ()
        grid, block = dims.setdefault(grid, grid), dims.setdefault(block, block)
        act = GpuActivity(*r[1:10], grid, block, *r[16:19], stack, *r[20:22])  # type: ignore[call-arg]
        out.append((r[0], act))
    return out


def gpu_activities(conn: Connection, session_id: int, node: str | None = None) -> list[GpuActivity]:
    """All GPU activity records of a session (of one node, if given), in start order, with
    launch stacks."""
    return [a for _, a in _gpu_activity_rows(conn, session_id, stacks=True, node=node)]


def gpu_activities_by_node(
    conn: Connection,
    session_id: int,
    *,
    stacks: bool = False,
) -> dict[str, list[GpuActivity]]:
    """The same records per node (each node's GPU clock is its own), stacks optional."""
    out: dict[str, list[GpuActivity]] = {}
    for node, a in _gpu_activity_rows(conn, session_id, stacks=stacks):
        out.setdefault(node, []).append(a)
    return out


def _gpu_metric_rows(
    conn: Connection,
    session_id: int,
    metric: str | None,
    node: str | None = None,
    since_ns: int | None = None,
) -> list[tuple[str, GpuMetricSample]]:
    t = GpuMetricRow.__table__
    q = select(t).where(t.c.session_id == session_id)
    if metric is not None:
        q = q.where(t.c.metric == metric)
    if node is not None:
        q = q.where(t.c.node == node)
    if since_ns is not None:
        q = q.where(t.c.ts_ns >= since_ns)
    q = q.order_by(t.c.ts_ns, t.c.id)
    return [
        (
            r.node,
            GpuMetricSample(*_METRIC_FIELDS(r)),
        )
        for r in conn.execute(q)
    ]


def gpu_metrics(conn: Connection, session_id: int) -> list[GpuMetricSample]:
    """All GPU metric samples of a session, in time order."""
    return [m for _, m in _gpu_metric_rows(conn, session_id, None)]


def gpu_metrics_by_node(
    conn: Connection,
    session_id: int,
    *,
    metric: str | None = None,
) -> dict[str, list[GpuMetricSample]]:
    """GPU metric samples per node, in time order; only `metric` when given."""
    out: dict[str, list[GpuMetricSample]] = {}
    for node, m in _gpu_metric_rows(conn, session_id, metric):
        out.setdefault(node, []).append(m)
    return out


def gpu_users(conn: Connection, session_id: int) -> set[tuple[str, int, int]]:
    """(node, device, pid) of every process seen on a GPU: in kernel records or NVML rows."""
    a = (
        select(GpuActivityRow.node, GpuActivityRow.device, GpuActivityRow.pid)
        .distinct()
        .where(GpuActivityRow.session_id == session_id)
    )
    m = (
        select(GpuMetricRow.node, GpuMetricRow.device, GpuMetricRow.pid)
        .distinct()
        .where(GpuMetricRow.session_id == session_id, GpuMetricRow.pid != 0)
    )
    return {(r[0], int(r[1]), int(r[2])) for q in (a, m) for r in conn.execute(q)}


def pid_pods(conn: Connection, session_id: int) -> dict[tuple[str, int], str]:
    """(node, pid) -> pod UID, for the processes that belong to a pod."""
    q = select(ProcessRow.node, ProcessRow.pid, ProcessRow.pod_uid).where(
        ProcessRow.session_id == session_id
    )
    return {(r.node, r.pid): r.pod_uid for r in conn.execute(q) if r.pod_uid}


def sample_counts(conn: Connection, session_id: int) -> list[tuple[str, int, int]]:
    """(node, pid, CPU samples) of a session."""
    q = (
        select(SampleRow.node, SampleRow.pid, func.count())
        .where(SampleRow.session_id == session_id)
        .group_by(SampleRow.node, SampleRow.pid)
    )
    return [(node, int(pid), int(n)) for node, pid, n in conn.execute(q)]


def top_stacks(
    conn: Connection,
    session_id: int,
    limit: int,
    *,
    node: str | None = None,
    pids: Collection[tuple[str, int]] | None = None,
) -> list[tuple[Stack, int]]:
    """The `limit` stacks with most CPU samples; of one node, or of some (node, pid)s."""
    conds: list[ColumnElement[bool]] = [SampleRow.session_id == session_id]
    if node is not None:
        conds.append(SampleRow.node == node)
    if pids is not None:
        if not pids:
            return []
        conds.append(or_(*(and_(SampleRow.node == n, SampleRow.pid == p) for n, p in pids)))
    n = func.count().label("n")
    q = (
        select(SampleRow.stack_id, n)
        .where(*conds)
        .group_by(SampleRow.stack_id)
        .order_by(n.desc(), SampleRow.stack_id)
        .limit(limit)
    )
    rows = conn.execute(q).all()
    stacks = load_stacks(conn, (r.stack_id for r in rows))
    return [(stacks[r.stack_id], int(r.n)) for r in rows]


def top_stack_per_pod(conn: Connection, session_id: int) -> dict[str, tuple[Stack, int]]:
    """Each pod's stack with most CPU samples (ties: the lowest stack id, as `top_stacks`),
    in one pass over the session's samples; a query per pod cost pods x samples."""
    n = func.count().label("n")
    per_pod = (
        select(ProcessRow.pod_uid, SampleRow.stack_id, n)
        .join(
            ProcessRow,
            and_(
                ProcessRow.session_id == SampleRow.session_id,
                ProcessRow.node == SampleRow.node,
                ProcessRow.pid == SampleRow.pid,
            ),
        )
        .where(SampleRow.session_id == session_id, ProcessRow.pod_uid != "")
        .group_by(ProcessRow.pod_uid, SampleRow.stack_id)
        .subquery()
    )
    rank = func.row_number().over(
        partition_by=per_pod.c.pod_uid, order_by=(per_pod.c.n.desc(), per_pod.c.stack_id)
    )
    ranked = select(per_pod, rank.label("rank")).subquery()
    rows = conn.execute(
        select(ranked.c.pod_uid, ranked.c.stack_id, ranked.c.n).where(ranked.c.rank == 1)
    ).all()
    stacks = load_stacks(conn, (r.stack_id for r in rows))
    return {r.pod_uid: (stacks[r.stack_id], int(r.n)) for r in rows}


def counters(conn: Connection, session_id: int) -> dict[str, int]:
    """Counters summed over nodes."""
    q = (
        select(CounterRow.name, func.sum(CounterRow.value))
        .where(CounterRow.session_id == session_id)
        .group_by(CounterRow.name)
    )
    return {name: int(v) for name, v in conn.execute(q)}


def gpu_tracers(conn: Connection, session_id: int) -> list[GpuTracerState]:
    """The latest answer of every injected GPU tracer the session's agents reached."""
    q = (
        select(
            GpuTracerRow.pod_uid,
            GpuTracerRow.pid,
            GpuTracerRow.socket,
            GpuTracerRow.state,
            GpuTracerRow.reason,
        )
        .where(GpuTracerRow.session_id == session_id)
        .order_by(GpuTracerRow.pod_uid, GpuTracerRow.node, GpuTracerRow.socket)
    )
    return [
        GpuTracerState(r.pod_uid, int(r.pid), r.socket, r.state, r.reason) for r in conn.execute(q)
    ]


def load_profile(conn: Connection, session: SessionInfo) -> Profile:
    """The CPU part of a session's profile; GPU stacks are added by the GPU analysis."""
    meta = dict(session.meta)
    meta.update({f"counter.{k}": str(v) for k, v in counters(conn, session.id).items()})
    if session.command:
        meta.setdefault("command", session.command)
    return Profile(
        session=session.name,
        hz=session.hz,
        duration_s=session.duration_s,
        cpu=cpu_stacks(conn, session),
        meta=meta,
        offcpu=offcpu.offcpu_stacks(conn, session.id),
    )


def latest_gpu_ns(conn: Connection, session_id: int) -> dict[str, int]:
    """Per node, the newest timestamp of any GPU record (kernel end or metric sample).

    "Now" on that node's clock: a rolling window ends here, so it needs no clock agreement
    between the operator and the node.
    """
    out: dict[str, int] = {}
    for q in (
        select(GpuActivityRow.node, func.max(GpuActivityRow.end_ns))
        .where(GpuActivityRow.session_id == session_id)
        .group_by(GpuActivityRow.node),
        select(GpuMetricRow.node, func.max(GpuMetricRow.ts_ns))
        .where(GpuMetricRow.session_id == session_id)
        .group_by(GpuMetricRow.node),
    ):
        for node, ts in conn.execute(q):
            if ts is not None:
                out[node] = max(out.get(node, 0), int(ts))
    return out


def recent_gpu_records(
    conn: Connection,
    session_id: int,
    node: str,
    since_ns: int,
) -> tuple[list[GpuActivity], list[GpuMetricSample]]:
    """One node's kernel records and NVML utilisation samples from ``since_ns`` on."""
    acts = [
        a
        for _, a in _gpu_activity_rows(conn, session_id, stacks=False, node=node, since_ns=since_ns)
    ]
    util = [
        m
        for _, m in _gpu_metric_rows(conn, session_id, "gpu_util_pct", node=node, since_ns=since_ns)
    ]
    return acts, util


def sample_columns(
    conn: Connection, session: SessionInfo, node: str | None = None
) -> SampleColumns | None:
    """A session's CPU samples as columns for the analysis, per thread in time order.

    Read per thread into ``array('q')`` columns (``bulk_read.thread_columns``), so ten
    million samples never become objects. ``hz`` is the session's sampling rate and
    ``source`` its ``cpu_source`` meta (``bpf`` unless the py-spy fallback ran). None when
    the session has no CPU samples. Nodes are not told apart unless ``node`` names one (a
    local session has one; a timeline draws one node's clock).
    """
    threads, stack_index = thread_columns(conn, session.id, node)
    if not threads:
        return None
    loaded = load_stacks(conn, stack_index)
    stacks: list[Stack] = [()] * len(stack_index)
    for stack_id, i in stack_index.items():
        stacks[i] = loaded.get(stack_id, ())
    return SampleColumns(
        tuple(threads), tuple(stacks), float(session.hz), session.meta.get("cpu_source") or "bpf"
    )
