"""One reconcile pass of a ProfilingSession: observe, decide (phases.py), act, report.

Level-based and idempotent: a pass reads the CR, the cluster and the database, brings the
children (Secret, DaemonSets) in line, and returns the whole new `.status`. Nothing lives
only in memory, so the pass after an operator restart picks up where the last one was.

The pass is a row of steps (`handle_<step>`), each over the session's typed view
(session.py) and parsed spec; a step that settles the outcome early (a refusal, an ended
session, a failed aggregation) raises `PassDone` with the final status.
"""

from __future__ import annotations

import base64
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import InterfaceError, OperationalError

from kubeprof.operator import (
    aggregate,
    build,
    daemonsets,
    db,
    light_deep,
    metrics,
    no_data,
    tenancy,
    tracer_status,
    view_fill,
)
from kubeprof.operator.agent_failures import AgentFailure
from kubeprof.operator.config import LABEL_COMPONENT, LABEL_SESSION, TOKEN_KEY
from kubeprof.operator.context import Context, KubeOps
from kubeprof.operator.kube import KubeError
from kubeprof.operator.phases import TERMINAL, Observed, Phase, Step, condition, next_step
from kubeprof.operator.registry import SessionEntry
from kubeprof.operator.session import SessionView, iso
from kubeprof.operator.spec import SessionSpec, SpecError, parse
from kubeprof.operator.targets import Target, nodes_of, resolve
from kubeprof.storage import compaction, queries

__all__ = ["Context", "KubeOps", "reconcile"]

log = logging.getLogger("kubeprof.operator")


class PassDone(Exception):
    """A step settled the pass's outcome early; `status` is the final status."""

    def __init__(self, status: dict[str, Any]) -> None:
        super().__init__("pass done")
        self.status = status


@dataclass(frozen=True, slots=True)
class Pass:
    """One pass's fixed inputs, and the status it builds (the one mutable part)."""

    ctx: Context
    s: SessionView
    spec: SessionSpec
    now: float
    status: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Targets:
    """The session's target pods as this pass resolved them."""

    pods: list[Target]
    nodes: list[str]
    ever: bool  # some pod matched at some point of the session


@dataclass(frozen=True, slots=True)
class Agents:
    """Where the session's agents stand after this pass placed them."""

    sets: list[dict]  # its agent DaemonSets (all shards)
    pods: list[dict]  # its agent pods
    ready: int  # ready agent pods
    expected: int  # nodes its DaemonSets pin
    failure: AgentFailure | None  # why agent pods are missing, if they are
    light: light_deep.Placement | None  # what light agents took over (--light-token-file)


def reconcile(ctx: Context, body: Mapping[str, Any]) -> dict[str, Any]:
    """One pass; returns the full new status (the handler patches it onto the CR)."""
    s = SessionView.from_body(body)
    status = dict(s.status)
    now = ctx.clock()
    try:
        p = Pass(ctx, s, handle_spec(ctx, s, status, now), now, status)
        handle_admission(p)
        entry = handle_store(p)
        handle_ended(p, entry)
        targets = handle_targets(p, entry)
        step, drain_until = handle_phase(p, entry, targets)
        agents = handle_agents(p, entry, step, targets)
        if step.phase is Phase.RUNNING:
            handle_running(p, entry)
        if step.reason == "ReadyToAggregate":
            step = handle_aggregation(p, entry, targets, agents, drain_until)
        elif step.phase is Phase.FAILED:
            handle_failed(p, entry)
    except PassDone as done:
        return done.status
    entry.phase = step.phase
    return handle_status(p, entry, step, targets, agents)


def handle_spec(ctx: Context, s: SessionView, status: dict[str, Any], now: float) -> SessionSpec:
    """The typed spec; a spec that cannot run fails the session, naming the field."""
    try:
        return parse(s.raw_spec)
    except SpecError as exc:
        raise PassDone(
            _refuse(ctx, s, status, "InvalidSpec", f"invalid spec: {exc}", now)
        ) from None


def handle_admission(p: Pass) -> None:
    """Whether the session may run at all: not one refused before it started (tenancy:
    nothing made, nothing to keep), nor one whose target namespace is not its to profile."""
    phase = p.s.phase
    if phase in TERMINAL:
        if not p.s.stored:
            raise PassDone(p.status)
        return
    refusal = _tenancy_refusal(p)
    if refusal is not None:
        raise PassDone(_refuse(p.ctx, p.s, p.status, refusal.reason, refusal.message, p.now))


def handle_store(p: Pass) -> SessionEntry:
    """The session's times in `.status`, its database row and its registry entry (made
    again after an operator restart, from the CR, its Secret and the database)."""
    ctx, s, spec = p.ctx, p.s, p.spec
    start = s.start_time or p.now
    end = s.end_time or start + spec.duration_s
    p.status.update(startTime=iso(start), endTime=iso(end), observedGeneration=s.generation)
    entry = ctx.writer_registry.get(s.namespace, s.name)
    if entry is None or entry.uid != s.uid:
        run_meta = {
            "namespace": s.namespace,
            "session": s.name,
            "uid": s.uid,
            **(spec.carbon.meta() if spec.carbon else {}),
        }
        db_id = db.ensure_session(
            ctx.engine,
            s.namespace,
            s.name,
            s.uid,
            hz=spec.profilers.cpu.frequency_hz,
            started_at=datetime.fromtimestamp(start, UTC),
            meta=run_meta,
        )
        # An ended session takes no data: its Secret (removed when it failed) is not made
        # again; an unguessable token stands in.
        token = secrets.token_urlsafe(32) if s.phase in TERMINAL else _token(ctx, s)
        entry = SessionEntry(s.namespace, s.name, s.uid, db_id, token)
        ctx.writer_registry.put(entry)
    entry.start_time, entry.end_time = start, end
    p.status["storeSession"] = db.store_name(s.namespace, s.name, s.uid)
    return entry


def handle_ended(p: Pass, entry: SessionEntry) -> None:
    """An ended session keeps its status; only its agents are (still) removed."""
    phase = p.s.phase
    if phase in TERMINAL:
        assert phase is not None
        entry.phase = phase
        daemonsets.remove(p.ctx, p.s)
        raise PassDone(p.status)


def handle_targets(p: Pass, entry: SessionEntry) -> Targets:
    """The target pods now; new ones are recorded (pod UID -> name) in the session's row."""
    tgt = p.spec.target
    try:
        pods = [t for t in p.ctx.kube.list_pods(tgt.namespace, tgt.selector) if not _own_agent(t)]
        labels = p.ctx.kube.node_labels() if tgt.node_selector else {}
    except KubeError as exc:
        if exc.status not in (400, 422):
            raise
        # The API server refuses the selector itself: retrying cannot help.
        raise PassDone(
            _refuse(
                p.ctx,
                p.s,
                p.status,
                "InvalidSelector",
                f"the API server refuses spec.target.podSelector: {exc.message[:300]}",
                p.now,
            )
        ) from None
    targets = resolve(pods, labels, tgt.node_selector)
    known = {t.uid for t in entry.targets}
    new = {t.uid: f"{t.namespace}/{t.name}" for t in targets if t.uid not in known}
    if new:
        db.merge_meta(p.ctx.engine, entry.db_id, {f"pod:{k}": v for k, v in new.items()})
    entry.targets = targets
    return Targets(targets, nodes_of(targets), p.s.ever_matched or bool(targets))


def handle_phase(p: Pass, entry: SessionEntry, targets: Targets) -> tuple[Step, float]:
    """The phase machine's next step, and when the drain ends (it starts on the first
    pass past the end time)."""
    end, n = entry.end_time, len(targets.pods)
    drain_until = p.s.drain_until
    step = next_step(p.s.phase, Observed(p.now, end, drain_until, n, targets.ever))
    if step.phase is Phase.AGGREGATING and p.s.phase is not Phase.AGGREGATING:
        drain_until = p.now + p.ctx.config.drain_s
        p.status["drainUntil"] = iso(drain_until)
        step = next_step(Phase.AGGREGATING, Observed(p.now, end, drain_until, n, targets.ever))
    return step, drain_until


def handle_agents(p: Pass, entry: SessionEntry, step: Step, targets: Targets) -> Agents:
    """Place the agents: light agents take the nodes they can, the DaemonSets pin the rest
    (while aggregating they stay as they are, to flush); then count the ready ones."""
    ctx, s = p.ctx, p.s
    ds_nodes, light = targets.nodes, None
    if ctx.light is not None and step.phase in (Phase.PENDING, Phase.RUNNING):
        # Nodes whose always-on light agent can go deep get no DaemonSet pod: that agent
        # profiles the session's pods there (light_deep); the DaemonSets keep the rest.
        in_ds = sorted(
            {n for ds in daemonsets.by_shard(ctx, s).values() for n in daemonsets.pinned_nodes(ds)}
        )
        light = light_deep.hand_over(
            ctx.light,
            s.meta,
            p.spec,
            targets.nodes,
            entry.end_time,
            in_ds,
            tuple(build.collectors_for(p.spec.profilers)),
        )
        ds_nodes = light.ds_nodes
    sets: list[dict] = []
    if step.phase in (Phase.PENDING, Phase.RUNNING, Phase.AGGREGATING):
        # While aggregating, agents stay up to flush; no re-pinning to new pods.
        pin = ds_nodes if step.phase is not Phase.AGGREGATING else None
        sets = daemonsets.sync(ctx, s, p.spec, pin, entry.end_time)
    counts = [(ds.get("status") or {}) for ds in sets]
    # Ready agent pods of the session, against the nodes its DaemonSets pin: the
    # DaemonSet controller's own counters lag the pods on a busy control plane.
    selector = f"{LABEL_SESSION}={s.name},{LABEL_COMPONENT}=agent"
    pods = ctx.kube.list_pods(s.namespace, selector) if sets else []
    ready = sum(1 for pod in pods if no_data.ready(pod))
    expected = sum(len(daemonsets.pinned_nodes(ds)) for ds in sets)
    failure = (
        daemonsets.failure(ctx, s, sets)
        if ready < expected or any(not int(st.get("desiredNumberScheduled", 0)) for st in counts)
        else None
    )
    return Agents(sets, pods, ready, expected, failure, light)


def handle_running(p: Pass, entry: SessionEntry) -> None:
    """While the session runs, `kubeprof_gpu_idle_ratio` is idle over the last window."""
    with p.ctx.engine.connect() as conn:
        figures = aggregate.recent_gpu_idle(conn, entry.db_id, p.ctx.config.gpu_idle_window_s)
        users = aggregate.gpu_pods(conn, entry.db_id)
        pod_names = _pod_names(conn, entry.db_id)
    metrics.publish_recent_gpu_idle(p.s.namespace, p.s.name, figures, users, pod_names)


def handle_aggregation(
    p: Pass, entry: SessionEntry, targets: Targets, agents: Agents, drain_until: float
) -> Step:
    """Aggregate the drained session and remove its agents; the step after it (Completed,
    saying so when no agent delivered anything). A failed aggregation is counted against
    the retry budget (`PassDone`); a database or API outage is raised, not counted."""
    ctx, s = p.ctx, p.s
    with ctx.engine.connect() as conn:
        pod_names = _pod_names(conn, entry.db_id)
    try:
        p.status.update(_close_and_aggregate(p, entry, pod_names))
    except Exception as exc:  # counted against the retry budget
        if isinstance(exc, (OperationalError, InterfaceError, KubeError)):
            raise  # an outage: the handler retries without counting it
        raise PassDone(_aggregation_failed(p, exc)) from exc
    p.status.pop("aggregationFailures", None)
    done = Observed(
        p.now, entry.end_time, drain_until, len(targets.pods), targets.ever, aggregated=True
    )
    step = next_step(Phase.AGGREGATING, done)
    delivered, _ = db.known_origins(ctx.engine, entry.db_id)
    if not delivered:  # "results stored" would hide it: say so, and why (the pods)
        why, msg = no_data.explain(
            agents.pods, agents.failure, len(targets.nodes), s.namespace, s.name
        )
        step = replace(step, reason=why, message=msg)
        p.status["topFinding"] = msg
    p.status["completionTime"] = iso(ctx.clock())
    daemonsets.remove(ctx, s)
    return step


def handle_failed(p: Pass, entry: SessionEntry) -> None:
    """A session that just failed (nothing matched): its row ends, its agents go."""
    db.finish_session(p.ctx.engine, entry.db_id, "failed")
    metrics.end_session(p.s.namespace, p.s.name)
    daemonsets.remove(p.ctx, p.s)
    p.status["completionTime"] = iso(p.now)


def handle_status(
    p: Pass, entry: SessionEntry, step: Step, targets: Targets, agents: Agents
) -> dict[str, Any]:
    """The whole new status: phase, counts and the conditions."""
    status = p.status
    now_iso = iso(p.now)
    conds = status.get("conditions") or []
    tracing, tracers = _kernel_tracing(p, entry, now_iso, conds)
    if tracers is not None:
        status["gpuTracers"] = tracers
    ready, expected, failure = agents.ready, agents.expected, agents.failure
    extra = []
    if agents.light is not None:
        fields = light_deep.status_fields(agents.light, now_iso, conds)
        status["lightAgents"], extra = fields["lightAgents"], [fields["lightCondition"]]
        ready, expected = ready + agents.light.running, expected + len(agents.light.light_nodes)
    elif isinstance(status.get("lightAgents"), dict):  # ended: nothing handed over any more
        status["lightAgents"] = {**status["lightAgents"], "running": 0}
        extra = [c for c in conds if c.get("type") == "LightAgents"]
    n_pods, n_nodes = len(targets.pods), len(targets.nodes)
    status.update(
        phase=step.phase.value,
        reason=step.reason,
        message=step.message,
        nodes=n_nodes,
        pods=n_pods,
        everMatched=targets.ever,
        agents={"ready": ready, "expected": expected, "daemonSets": len(agents.sets)},
        agentsReady=f"{ready}/{expected}",
        conditions=[
            condition(
                "TargetsResolved",
                bool(targets.pods),
                "PodsMatched" if targets.pods else "NoMatchingPods",
                f"{n_pods} pod(s) on {n_nodes} node(s)",
                now_iso,
                conds,
            ),
            condition(
                "AgentsReady",
                expected > 0 and ready == expected,
                "AllReady"
                if expected and ready == expected
                else (failure.reason if failure else "NotReady"),
                f"{ready}/{expected} agent pods ready"
                + (f": {failure.message}" if failure else ""),
                now_iso,
                conds,
            ),
            condition(
                "Completed",
                step.phase is Phase.COMPLETED,
                step.reason if step.phase in TERMINAL else "InProgress",
                step.message,
                now_iso,
                conds,
            ),
            *tracing,
            *extra,
        ],
    )
    if failure is not None and step.phase not in TERMINAL:
        status.update(reason=failure.reason, message=failure.message)
    if step.phase is Phase.FAILED:
        status.setdefault("topFinding", step.message)
    return status


def _token(ctx: Context, s: SessionView) -> str:
    """The session's ingest token: from its Secret, creating the Secret the first time."""
    name = build.secret_name(s.body)
    for _ in range(2):
        sec = ctx.kube.get_secret(s.namespace, name)
        if sec is not None:
            return base64.b64decode(sec["data"][TOKEN_KEY]).decode()
        ctx.kube.create_secret(s.namespace, build.build_secret(s.body, secrets.token_urlsafe(32)))
    raise RuntimeError(f"secret {s.namespace}/{name} vanished right after creation")


def _own_agent(pod: Mapping[str, Any]) -> bool:
    """A kubeprof agent pod: never a target (a selector such as `!app` would match it)."""
    lbl = (pod.get("metadata") or {}).get("labels") or {}
    return (
        lbl.get("app.kubernetes.io/managed-by") == "kubeprof-operator"
        and lbl.get(LABEL_COMPONENT) == "agent"
    )


def _close_and_aggregate(p: Pass, entry: SessionEntry, pod_names: Mapping[str, str]) -> dict:
    """Stop ingest for the session, wait for writes in flight, aggregate, store the results."""
    ctx = p.ctx
    entry.close(timeout_s=10)  # batches still arriving after that are refused at commit
    try:
        compaction.compact(ctx.engine, entry.db_id)  # readers need not add what is left
        with ctx.engine.begin() as conn:
            summary = aggregate.aggregate(conn, entry.db_id, ctx.config.status_top_stacks)
            aggregate.store(conn, entry.db_id, summary)
        db.finish_session(ctx.engine, entry.db_id, "completed")
    except BaseException:
        entry.reopen()  # not aggregated: agents may keep delivering until we are
        raise
    view_fill.note(ctx.engine, entry.db_id)  # its report view, off this pass
    metrics.publish_gpu_idle(p.s.namespace, p.s.name, summary, dict(pod_names))
    metrics.publish_findings(p.s.namespace, p.s.name, summary)
    return aggregate.status_summary(summary, pod_names, ctx.config.status_top_targets)


def _pod_names(conn: Connection, session_id: int) -> dict[str, str]:
    """Pod UID -> namespace/name, as the reconciler recorded them in the session's meta."""
    return {
        k.removeprefix("pod:"): v
        for k, v in db.session_meta(conn, session_id).items()
        if k.startswith("pod:")
    }


def _refuse(
    ctx: Context,
    s: SessionView,
    status: dict[str, Any],
    reason: str,
    message: str,
    now: float,
) -> dict[str, Any]:
    """The status of a session that cannot run: Failed, saying why and what to do.

    Its agents (if any) are removed; a registry entry is dropped so the ingest stops
    accepting data for it.
    """
    daemonsets.remove(ctx, s)
    entry = ctx.writer_registry.get(s.namespace, s.name)
    if entry is not None and entry.uid == s.uid and not entry.closed:
        entry.closed, entry.targets = True, []
        db.finish_session(ctx.engine, entry.db_id, "failed")
    metrics.end_session(s.namespace, s.name)
    if status.get("phase") and Phase(status["phase"]) in TERMINAL:
        return status
    status.update(
        phase=Phase.FAILED.value,
        reason=reason,
        message=message,
        topFinding=message,
        completionTime=iso(now),
        conditions=[
            condition("Completed", False, reason, message, iso(now), status.get("conditions") or [])
        ],
    )
    return status


def _aggregation_failed(p: Pass, exc: Exception) -> dict[str, Any]:
    """The status after a failed aggregation: retried on the next passes, then, past the
    budget, Failed with the reason, its agents and Secret removed, so no session stays
    Aggregating for ever."""
    ctx, s, status = p.ctx, p.s, p.status
    n = s.aggregation_failures + 1
    budget = ctx.config.aggregation_attempts
    why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    log.warning(
        "aggregation of %s/%s failed (%d of %d): %s",
        s.namespace,
        s.name,
        n,
        budget,
        why,
        exc_info=n == 1,
    )
    status["aggregationFailures"] = n
    if n < budget:
        status.update(
            phase=Phase.AGGREGATING.value,
            reason="AggregationRetrying",
            message=f"aggregation failed ({n} of {budget} attempts): {why}",
        )
        return status
    out = _refuse(
        ctx,
        s,
        status,
        "AggregationFailed",
        f"aggregation failed {n} times, the last with {why}; the records stay "
        "stored, the session's agents and Secret are removed",
        p.now,
    )
    ctx.kube.delete_secret(s.namespace, build.secret_name(s.body))
    return out


def _tenancy_refusal(p: Pass) -> tenancy.Refusal | None:
    """Why this session may not profile its target namespace, or None."""
    target_ns = p.spec.target.namespace
    if target_ns == p.s.namespace:
        return None
    if not p.ctx.config.allow_cross_namespace:
        return tenancy.check(p.s.body, target_ns, False)
    policy, binding = p.ctx.kube.admission_policy(tenancy.POLICY)
    return tenancy.check(p.s.body, target_ns, True, policy, binding)


def _kernel_tracing(
    p: Pass, entry: SessionEntry, now_iso: str, previous: list[dict]
) -> tuple[list[dict], dict | None]:
    """The KernelTracing condition for sessions asking for it, and `.status.gpuTracers`
    (what the pods' injected tracers answered the agents) where the agents switch them."""
    gpu = p.spec.profilers.gpu
    if not gpu.kernel_tracing:
        return [], None
    if not gpu.enabled:
        message = "kernelTracing is ignored: the GPU profiler is disabled"
    elif not p.ctx.config.agent_gpu_socket_host_path:
        message = (
            "CUDA kernel tracing needs the tracer-injection webhook (chart value "
            "webhook.enabled, operator flag --webhook-tls-cert); GPU data is NVML "
            "metrics only"
        )
    else:
        with p.ctx.engine.connect() as conn:
            summary = tracer_status.summarize(
                queries.gpu_tracers(conn, entry.db_id), _pod_names(conn, entry.db_id)
            )
        ok, reason, message = tracer_status.condition_parts(summary)
        return [condition("KernelTracing", ok, reason, message, now_iso, previous)], summary
    return [condition("KernelTracing", False, "NotAvailable", message, now_iso, previous)], None
