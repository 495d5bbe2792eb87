"""One reconcile pass of a ProfilingSession: observe, decide (phases.py), act, report.

Level-based and idempotent: a pass reads the CR, the cluster and the database, brings the
children (Secret, DaemonSet) in line, and returns the whole new `.status`. Nothing lives
only in memory, so the pass after an operator restart picks up where the last one was.
"""

from __future__ import annotations

import base64
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import InterfaceError, OperationalError

from kubeprof.operator import (
    agent_failures,
    aggregate,
    build,
    db,
    light_deep,
    metrics,
    no_data,
    shards,
    tenancy,
    tracer_status,
)
from kubeprof.operator.config import LABEL_COMPONENT, LABEL_SESSION, TOKEN_KEY, OperatorConfig
from kubeprof.operator.kube import KubeError
from kubeprof.operator.phases import TERMINAL, Observed, Phase, condition, next_step
from kubeprof.operator.registry import Registry, SessionEntry
from kubeprof.operator.spec import SessionSpec, SpecError, TargetSpec, parse
from kubeprof.operator.targets import Target, nodes_of, resolve
from kubeprof.storage import queries

log = logging.getLogger("kubeprof.operator")


class KubeOps(Protocol):
    """The API calls a pass needs (kube.Kube in production, a fake in unit tests).

    Reads of one object answer None when it is absent (404); creates answer None when it
    exists already (409); other failures raise kube.KubeError.
    """

    def list_pods(self, namespace: str, selector: str) -> list[dict]: ...
    def node_labels(self) -> dict[str, dict[str, str]]: ...
    def node_kernels(self) -> dict[str, str]: ...
    def daemonset_events(self, namespace: str, name: str) -> list[dict]: ...
    def admission_policy(self, name: str) -> tuple[dict | None, dict | None]: ...
    def get_secret(self, namespace: str, name: str) -> dict | None: ...
    def create_secret(self, namespace: str, obj: dict) -> dict | None: ...
    def delete_secret(self, namespace: str, name: str) -> bool: ...
    def list_daemonsets(self, namespace: str, selector: str) -> list[dict]: ...
    def get_daemonset(self, namespace: str, name: str) -> dict | None: ...
    def create_daemonset(self, namespace: str, obj: dict) -> dict | None: ...
    def patch_daemonset(self, namespace: str, name: str, patch: dict) -> dict: ...
    def delete_daemonset(self, namespace: str, name: str) -> bool: ...


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def from_iso(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


@dataclass
class Context:
    """What a pass works with."""

    kube: KubeOps
    engine: Engine
    writer_registry: Registry
    config: OperatorConfig
    clock: Any = time.time
    light: light_deep.LightAgents | None = None  # deep-capable light agents (--light-token-file)


def _token(ctx: Context, body: Mapping[str, Any]) -> str:
    """The session's ingest token: from its Secret, creating the Secret the first time."""
    ns = body["metadata"]["namespace"]
    name = build.secret_name(body)
    for _ in range(2):
        sec = ctx.kube.get_secret(ns, name)
        if sec is not None:
            return base64.b64decode(sec["data"][TOKEN_KEY]).decode()
        ctx.kube.create_secret(ns, build.build_secret(body, secrets.token_urlsafe(32)))
    raise RuntimeError(f"secret {ns}/{name} vanished right after creation")


def _own_agent(pod: Mapping[str, Any]) -> bool:
    """A kubeprof agent pod: never a target (a selector such as `!app` would match it)."""
    lbl = (pod.get("metadata") or {}).get("labels") or {}
    return (
        lbl.get("app.kubernetes.io/managed-by") == "kubeprof-operator"
        and lbl.get(LABEL_COMPONENT) == "agent"
    )


def _targets(ctx: Context, tgt: TargetSpec) -> list[Target]:
    pods = [p for p in ctx.kube.list_pods(tgt.namespace, tgt.selector) if not _own_agent(p)]
    labels = ctx.kube.node_labels() if tgt.node_selector else {}
    return resolve(pods, labels, tgt.node_selector)


def _ds_nodes(ds: Mapping[str, Any]) -> list[str]:
    try:
        terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        return sorted(v for t in terms for f in t.get("matchFields", []) for v in f["values"])
    except (KeyError, IndexError, TypeError):
        return []


def _agent_sets(ctx: Context, body: Mapping[str, Any]) -> dict[int, dict]:
    """The session's agent DaemonSets by shard index (listed by the session's label)."""
    ns = body["metadata"]["namespace"]
    return {
        build.shard_of(ds): ds for ds in ctx.kube.list_daemonsets(ns, build.agent_selector(body))
    }


def _remove_daemonset(ctx: Context, body: Mapping[str, Any]) -> None:
    """Delete every agent DaemonSet (all shards) of the session."""
    ns = body["metadata"]["namespace"]
    for ds in _agent_sets(ctx, body).values():
        ctx.kube.delete_daemonset(ns, ds["metadata"]["name"])


def _sync_daemonset(
    ctx: Context,
    body: Mapping[str, Any],
    spec: SessionSpec,
    nodes: list[str] | None,
    end_time: float,
) -> list[dict]:
    """Create, re-pin or delete the agent DaemonSets (one per shard of at most
    `config.agent_shard_nodes` nodes, see shards.py) so they pin exactly `nodes`; returns
    them. `nodes` None keeps every shard as it is (aggregating: agents stay to flush)."""
    ns = body["metadata"]["namespace"]
    have = _agent_sets(ctx, body)
    if nodes is None:
        return list(have.values())
    if not nodes:
        _remove_daemonset(ctx, body)
        return []
    want = shards.assign(
        {i: _ds_nodes(ds) for i, ds in have.items()}, nodes, ctx.config.agent_shard_nodes
    )
    for i in sorted(set(have) - set(want)):
        ctx.kube.delete_daemonset(ns, have[i]["metadata"]["name"])
    out = []
    kernels: dict[str, str] | None = None
    for i, pinned in sorted(want.items()):
        ds = have.get(i)
        if ds is None:
            kernels = ctx.kube.node_kernels() if kernels is None else kernels
            obj = build.build_daemonset(
                body,
                spec,
                pinned,
                ctx.config,
                end_time,
                kernels=[kernels.get(n, "") for n in pinned],
                shard=i,
            )
            name = obj["metadata"]["name"]
            ds = ctx.kube.create_daemonset(ns, obj) or ctx.kube.get_daemonset(ns, name)
        elif _ds_nodes(ds) != pinned:
            patch = {"spec": {"template": {"spec": {"affinity": build.node_affinity(pinned)}}}}
            ds = ctx.kube.patch_daemonset(ns, ds["metadata"]["name"], patch)
        if ds is not None:
            out.append(ds)
    return out


def _close_and_aggregate(
    ctx: Context, entry: SessionEntry, body: Mapping[str, Any], pod_names: Mapping[str, str]
) -> dict:
    """Stop ingest for the session, wait for writes in flight, aggregate, store the results."""
    entry.close(timeout_s=10)  # batches still arriving after that are refused at commit
    try:
        with ctx.engine.begin() as conn:
            summary = aggregate.aggregate(conn, entry.db_id, ctx.config.status_top_stacks)
            aggregate.store(conn, entry.db_id, summary)
        db.finish_session(ctx.engine, entry.db_id, "completed")
    except BaseException:
        entry.reopen()  # not aggregated: agents may keep delivering until we are
        raise
    meta = body["metadata"]
    metrics.publish_gpu_idle(meta["namespace"], meta["name"], summary, dict(pod_names))
    metrics.publish_findings(meta["namespace"], meta["name"], summary)
    return aggregate.status_summary(summary, pod_names, ctx.config.status_top_targets)


def _publish_recent(ctx: Context, entry: SessionEntry, body: Mapping[str, Any]) -> None:
    """While the session runs, `kubeprof_gpu_idle_ratio` is idle over the last window."""
    with ctx.engine.connect() as conn:
        figures = aggregate.recent_gpu_idle(conn, entry.db_id, ctx.config.gpu_idle_window_s)
        users = aggregate.gpu_pods(conn, entry.db_id)
        pod_names = _pod_names(conn, entry.db_id)
    meta = body["metadata"]
    metrics.publish_recent_gpu_idle(meta["namespace"], meta["name"], figures, users, pod_names)


def _pod_names(conn: Connection, session_id: int) -> dict[str, str]:
    """Pod UID -> namespace/name, as the reconciler recorded them in the session's meta."""
    return {
        k.removeprefix("pod:"): v
        for k, v in db.session_meta(conn, session_id).items()
        if k.startswith("pod:")
    }


def _refuse(
    ctx: Context,
    body: Mapping[str, Any],
    status: dict[str, Any],
    reason: str,
    message: str,
    now: float,
) -> dict[str, Any]:
    """The status of a session that cannot run: Failed, saying why and what to do.

    Its agents (if any) are removed; a registry entry is dropped so the ingest stops
    accepting data for it.
    """
    _remove_daemonset(ctx, body)
    meta = body["metadata"]
    entry = ctx.writer_registry.get(meta["namespace"], meta["name"])
    if entry is not None and entry.uid == meta["uid"] and not entry.closed:
        entry.closed, entry.targets = True, []
        db.finish_session(ctx.engine, entry.db_id, "failed")
    metrics.end_session(meta["namespace"], meta["name"])
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


def _aggregation_failed(
    ctx: Context, body: Mapping[str, Any], status: dict[str, Any], exc: Exception, now: float
) -> dict[str, Any]:
    """The status after a failed aggregation: retried on the next passes, then, past the
    budget, Failed with the reason, its agents and Secret removed, so no session stays
    Aggregating for ever."""
    meta = body["metadata"]
    n = int(status.get("aggregationFailures") or 0) + 1
    budget = ctx.config.aggregation_attempts
    why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    log.warning(
        "aggregation of %s/%s failed (%d of %d): %s",
        meta["namespace"],
        meta["name"],
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
        body,
        status,
        "AggregationFailed",
        f"aggregation failed {n} times, the last with {why}; the records stay "
        "stored, the session's agents and Secret are removed",
        now,
    )
    ctx.kube.delete_secret(meta["namespace"], build.secret_name(body))
    return out


def _invalid_spec(
    ctx: Context, body: Mapping[str, Any], status: dict[str, Any], error: SpecError, now: float
) -> dict[str, Any]:
    """The status of a session whose spec cannot run: Failed, saying which field and why."""
    return _refuse(ctx, body, status, "InvalidSpec", f"invalid spec: {error}", now)


def _tenancy_refusal(
    ctx: Context, body: Mapping[str, Any], spec: SessionSpec
) -> tenancy.Refusal | None:
    """Why this session may not profile its target namespace, or None."""
    if spec.target.namespace == body["metadata"]["namespace"]:
        return None
    if not ctx.config.allow_cross_namespace:
        return tenancy.check(body, spec.target.namespace, False)
    policy, binding = ctx.kube.admission_policy(tenancy.POLICY)
    return tenancy.check(body, spec.target.namespace, True, policy, binding)


def _agent_failure(
    ctx: Context, body: Mapping[str, Any], sets: list[dict]
) -> agent_failures.AgentFailure | None:
    """Why agent pods are missing (Pod Security, quota, ...), read from the events of the
    first DaemonSet (shard) that lacks pods."""
    ns = body["metadata"]["namespace"]
    for ds in sets:
        st = ds.get("status") or {}
        expected = int(st.get("desiredNumberScheduled", 0))
        if expected and int(st.get("currentNumberScheduled", 0)) >= expected:
            continue  # every pod exists; not ready yet is the kubelet's business
        failure = agent_failures.explain(ctx.kube.daemonset_events(ns, ds["metadata"]["name"]), ns)
        if failure is not None:
            return failure
    return None


def _kernel_tracing(
    ctx: Context, entry: SessionEntry, spec: SessionSpec, now_iso: str, previous: list[dict]
) -> tuple[list[dict], dict | None]:
    """The KernelTracing condition for sessions asking for it, and `.status.gpuTracers`
    (what the pods' injected tracers answered the agents) where the agents switch them."""
    gpu = spec.profilers.gpu
    if not gpu.kernel_tracing:
        return [], None
    if not gpu.enabled:
        message = "kernelTracing is ignored: the GPU profiler is disabled"
    elif not ctx.config.agent_gpu_socket_host_path:
        message = (
            "CUDA kernel tracing needs the tracer-injection webhook (chart value "
            "webhook.enabled, operator flag --webhook-tls-cert); GPU data is NVML "
            "metrics only"
        )
    else:
        with ctx.engine.connect() as conn:
            summary = tracer_status.summarize(
                queries.gpu_tracers(conn, entry.db_id), _pod_names(conn, entry.db_id)
            )
        ok, reason, message = tracer_status.condition_parts(summary)
        return [condition("KernelTracing", ok, reason, message, now_iso, previous)], summary
    return [condition("KernelTracing", False, "NotAvailable", message, now_iso, previous)], None


def reconcile(ctx: Context, body: Mapping[str, Any]) -> dict[str, Any]:
    """One pass; returns the full new status (the handler patches it onto the CR)."""
    meta = body["metadata"]
    status: dict[str, Any] = dict(body.get("status") or {})
    status.pop("kopf", None)
    ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
    now = ctx.clock()
    try:
        spec = parse(body.get("spec") or {})
    except SpecError as exc:
        return _invalid_spec(ctx, body, status, exc, now)
    phase = Phase(status["phase"]) if status.get("phase") else None
    if phase in TERMINAL and not status.get("storeSession"):
        return status  # refused before it started (tenancy): nothing made, nothing to keep
    refusal = None if phase in TERMINAL else _tenancy_refusal(ctx, body, spec)
    if refusal is not None:
        return _refuse(ctx, body, status, refusal.reason, refusal.message, now)

    start = from_iso(status.get("startTime")) or now
    end = from_iso(status.get("endTime")) or start + spec.duration_s
    status.update(
        startTime=iso(start), endTime=iso(end), observedGeneration=meta.get("generation", 1)
    )

    entry = ctx.writer_registry.get(ns, name)
    if entry is None or entry.uid != uid:
        run_meta = {
            "namespace": ns,
            "session": name,
            "uid": uid,
            **(spec.carbon.meta() if spec.carbon else {}),
        }
        db_id = db.ensure_session(
            ctx.engine,
            ns,
            name,
            uid,
            hz=spec.profilers.cpu.frequency_hz,
            started_at=datetime.fromtimestamp(start, UTC),
            meta=run_meta,
        )
        # An ended session takes no data: its Secret (removed when it failed) is not made
        # again; an unguessable token stands in.
        token = secrets.token_urlsafe(32) if phase in TERMINAL else _token(ctx, body)
        entry = SessionEntry(ns, name, uid, db_id, token)
        ctx.writer_registry.put(entry)
    entry.start_time, entry.end_time = start, end
    status["storeSession"] = db.store_name(ns, name, uid)

    if phase in TERMINAL:
        entry.phase = phase
        _remove_daemonset(ctx, body)
        return status

    try:
        targets = _targets(ctx, spec.target)
    except KubeError as exc:
        if exc.status not in (400, 422):
            raise
        # The API server refuses the selector itself: retrying cannot help.
        return _refuse(
            ctx,
            body,
            status,
            "InvalidSelector",
            f"the API server refuses spec.target.podSelector: {exc.message[:300]}",
            now,
        )
    known = {t.uid for t in entry.targets}
    new = {t.uid: f"{t.namespace}/{t.name}" for t in targets if t.uid not in known}
    if new:
        db.merge_meta(ctx.engine, entry.db_id, {f"pod:{k}": v for k, v in new.items()})
    entry.targets = targets
    nodes = nodes_of(targets)
    ever = bool(status.get("everMatched")) or bool(targets)

    drain_until = from_iso(status.get("drainUntil")) or 0.0
    step = next_step(phase, Observed(now, end, drain_until, len(targets), ever))
    if step.phase is Phase.AGGREGATING and phase is not Phase.AGGREGATING:
        drain_until = now + ctx.config.drain_s
        status["drainUntil"] = iso(drain_until)
        step = next_step(Phase.AGGREGATING, Observed(now, end, drain_until, len(targets), ever))

    ds_nodes, light = nodes, None
    if ctx.light is not None and step.phase in (Phase.PENDING, Phase.RUNNING):
        # Nodes whose always-on light agent can go deep get no DaemonSet pod: that agent
        # profiles the session's pods there (light_deep); the DaemonSets keep the rest.
        in_ds = sorted({n for ds in _agent_sets(ctx, body).values() for n in _ds_nodes(ds)})
        light = light_deep.hand_over(
            ctx.light, meta, spec, nodes, end, in_ds, tuple(build.collectors_for(spec.profilers))
        )
        ds_nodes = light.ds_nodes
    sets: list[dict] = []
    if step.phase in (Phase.PENDING, Phase.RUNNING, Phase.AGGREGATING):
        # While aggregating, agents stay up to flush; no re-pinning to new pods.
        sets = _sync_daemonset(
            ctx, body, spec, ds_nodes if step.phase is not Phase.AGGREGATING else None, end
        )
    counts = [(ds.get("status") or {}) for ds in sets]
    # Ready agent pods of the session, against the nodes its DaemonSets pin: the
    # DaemonSet controller's own counters lag the pods on a busy control plane.
    agent_pods = (
        ctx.kube.list_pods(ns, f"{LABEL_SESSION}={name},{LABEL_COMPONENT}=agent") if sets else []
    )
    ready = sum(1 for p in agent_pods if no_data.ready(p))
    expected = sum(len(_ds_nodes(ds)) for ds in sets)
    failure = (
        _agent_failure(ctx, body, sets)
        if ready < expected or any(not int(st.get("desiredNumberScheduled", 0)) for st in counts)
        else None
    )

    if step.phase is Phase.RUNNING:
        _publish_recent(ctx, entry, body)
    if step.reason == "ReadyToAggregate":
        with ctx.engine.connect() as conn:
            pod_names = _pod_names(conn, entry.db_id)
        try:
            status.update(_close_and_aggregate(ctx, entry, body, pod_names))
        except Exception as exc:  # counted against the retry budget
            if isinstance(exc, (OperationalError, InterfaceError, KubeError)):
                raise  # an outage: the handler retries without counting it
            return _aggregation_failed(ctx, body, status, exc, now)
        status.pop("aggregationFailures", None)
        step = next_step(
            Phase.AGGREGATING, Observed(now, end, drain_until, len(targets), ever, aggregated=True)
        )
        delivered, _ = db.known_origins(ctx.engine, entry.db_id)
        if not delivered:  # "results stored" would hide it: say so, and why (the pods)
            why, msg = no_data.explain(agent_pods, failure, len(nodes), ns, name)
            step = replace(step, reason=why, message=msg)
            status["topFinding"] = msg
        status["completionTime"] = iso(ctx.clock())
        _remove_daemonset(ctx, body)
    elif step.phase is Phase.FAILED:
        db.finish_session(ctx.engine, entry.db_id, "failed")
        metrics.end_session(ns, name)
        _remove_daemonset(ctx, body)
        status["completionTime"] = iso(now)

    entry.phase = step.phase
    now_iso = iso(now)
    conds = status.get("conditions") or []
    tracing, tracers = _kernel_tracing(ctx, entry, spec, now_iso, conds)
    if tracers is not None:
        status["gpuTracers"] = tracers
    extra = []
    if light is not None:
        fields = light_deep.status_fields(light, now_iso, conds)
        status["lightAgents"], extra = fields["lightAgents"], [fields["lightCondition"]]
        ready, expected = ready + light.running, expected + len(light.light_nodes)
    elif isinstance(status.get("lightAgents"), dict):  # ended: nothing handed over any more
        status["lightAgents"] = {**status["lightAgents"], "running": 0}
        extra = [c for c in conds if c.get("type") == "LightAgents"]
    status.update(
        phase=step.phase.value,
        reason=step.reason,
        message=step.message,
        nodes=len(nodes),
        pods=len(targets),
        everMatched=ever,
        agents={"ready": ready, "expected": expected, "daemonSets": len(sets)},
        agentsReady=f"{ready}/{expected}",
        conditions=[
            condition(
                "TargetsResolved",
                bool(targets),
                "PodsMatched" if targets else "NoMatchingPods",
                f"{len(targets)} pod(s) on {len(nodes)} node(s)",
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
