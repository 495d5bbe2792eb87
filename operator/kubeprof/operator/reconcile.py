"""One reconcile pass of a ProfilingSession: observe, decide (phases.py), act, report.

Level-based and idempotent: a pass reads the CR, the cluster and the database, brings the
children (Secret, DaemonSet) in line, and returns the whole new `.status`. Nothing lives
only in memory, so the pass after an operator restart picks up where the last one was.
"""

from __future__ import annotations

import base64
import logging
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy.engine import Engine

from kubeprof.operator import aggregate, build, db, metrics
from kubeprof.operator.config import TOKEN_KEY, OperatorConfig
from kubeprof.operator.phases import TERMINAL, Observed, Phase, condition, next_step
from kubeprof.operator.registry import Registry, SessionEntry
from kubeprof.operator.targets import Target, label_selector, nodes_of, resolve

log = logging.getLogger("kubeprof.operator")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class KubeOps(Protocol):
    """The API calls a pass needs (kube.Kube in production, a fake in unit tests)."""

    def list_pods(self, namespace: str, selector: str) -> list[dict]: ...
    def node_labels(self) -> dict[str, dict[str, str]]: ...
    def get_secret(self, namespace: str, name: str) -> dict | None: ...
    def create(self, path: str, obj: dict) -> dict | None: ...
    def get_daemonset(self, namespace: str, name: str) -> dict | None: ...
    def patch_daemonset(self, namespace: str, name: str, patch: dict) -> dict: ...
    def delete_daemonset(self, namespace: str, name: str) -> bool: ...


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration ("90s", "1h30m"); ValueError when malformed."""
    text = text.strip()
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 10m, 1h30m)")
    return total


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


def _token(ctx: Context, body: Mapping[str, Any]) -> str:
    """The session's ingest token: from its Secret, creating the Secret the first time."""
    ns = body["metadata"]["namespace"]
    name = build.secret_name(body)
    for _ in range(2):
        sec = ctx.kube.get_secret(ns, name)
        if sec is not None:
            return base64.b64decode(sec["data"][TOKEN_KEY]).decode()
        ctx.kube.create(f"/api/v1/namespaces/{ns}/secrets",
                        build.build_secret(body, secrets.token_urlsafe(32)))
    raise RuntimeError(f"secret {ns}/{name} vanished right after creation")


def _targets(ctx: Context, spec: Mapping[str, Any]) -> list[Target]:
    tgt = spec["target"]
    pods = ctx.kube.list_pods(tgt["namespace"], label_selector(tgt["podSelector"]))
    node_sel = tgt.get("nodeSelector") or {}
    labels = ctx.kube.node_labels() if node_sel else {}
    return resolve(pods, labels, node_sel)


def _ds_nodes(ds: Mapping[str, Any]) -> list[str]:
    try:
        terms = (ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
                 ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"])
        return sorted(v for t in terms for f in t.get("matchFields", []) for v in f["values"])
    except (KeyError, IndexError, TypeError):
        return []


def _sync_daemonset(ctx: Context, body: Mapping[str, Any], nodes: list[str],
                    end_time: float) -> dict | None:
    """Create, re-pin or delete the agent DaemonSet; returns it (None when there is none)."""
    ns, name = body["metadata"]["namespace"], build.daemonset_name(body)
    ds = ctx.kube.get_daemonset(ns, name)
    if not nodes:
        if ds is not None:
            ctx.kube.delete_daemonset(ns, name)
        return None
    if ds is None:
        want = build.build_daemonset(body, nodes, ctx.config, end_time)
        return ctx.kube.create(f"/apis/apps/v1/namespaces/{ns}/daemonsets", want) or \
            ctx.kube.get_daemonset(ns, name)
    if _ds_nodes(ds) != sorted(nodes):
        patch = {"spec": {"template": {"spec": {"affinity": build.node_affinity(nodes)}}}}
        return ctx.kube.patch_daemonset(ns, name, patch)
    return ds


def _close_and_aggregate(ctx: Context, entry: SessionEntry, body: Mapping[str, Any],
                         pod_names: Mapping[str, str]) -> dict:
    """Stop ingest for the session, wait for writes in flight, aggregate, store the results."""
    entry.closed = True
    deadline = time.monotonic() + 10
    while entry.inflight > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        with ctx.engine.begin() as conn:
            summary = aggregate.aggregate(conn, entry.db_id, ctx.config.status_top_stacks)
            aggregate.store(conn, entry.db_id, summary)
        db.finish_session(ctx.engine, entry.db_id, "completed")
    except BaseException:
        entry.closed = False  # not aggregated: agents may keep delivering until we are
        raise
    meta = body["metadata"]
    metrics.publish_gpu_idle(meta["namespace"], meta["name"], summary, dict(pod_names))
    return aggregate.status_summary(summary, pod_names, ctx.config.status_top_targets)


def reconcile(ctx: Context, body: Mapping[str, Any]) -> dict[str, Any]:
    """One pass; returns the full new status (the handler patches it onto the CR)."""
    meta, spec = body["metadata"], body.get("spec") or {}
    status: dict[str, Any] = dict(body.get("status") or {})
    status.pop("kopf", None)
    ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
    now = ctx.clock()
    phase = Phase(status["phase"]) if status.get("phase") else None

    start = from_iso(status.get("startTime")) or now
    end = from_iso(status.get("endTime")) or start + parse_duration(spec.get("duration", "5m"))
    status.update(startTime=iso(start), endTime=iso(end), observedGeneration=meta.get(
        "generation", 1))

    entry = ctx.writer_registry.get(ns, name)
    if entry is None or entry.uid != uid:
        hz = int(((spec.get("profilers") or {}).get("cpu") or {}).get("frequencyHz", 99))
        db_id = db.ensure_session(ctx.engine, ns, name, uid, hz=hz,
                                  started_at=datetime.fromtimestamp(start, UTC),
                                  meta={"namespace": ns, "session": name, "uid": uid})
        entry = SessionEntry(ns, name, uid, db_id, _token(ctx, body))
        ctx.writer_registry.put(entry)
    entry.end_time = end
    status["storeSession"] = db.store_name(ns, name, uid)

    if phase in TERMINAL:
        entry.phase = phase
        _sync_daemonset(ctx, body, [], end)
        return status

    targets = _targets(ctx, spec)
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

    ds = None
    if step.phase in (Phase.PENDING, Phase.RUNNING, Phase.AGGREGATING):
        # While aggregating, agents stay up to flush; no re-pinning to new pods.
        ds = _sync_daemonset(ctx, body, nodes if step.phase is not Phase.AGGREGATING
                             else (_ds_nodes(ctx.kube.get_daemonset(
                                 ns, build.daemonset_name(body)) or {}) or []), end)
    ds_status = (ds or {}).get("status") or {}
    ready, expected = int(ds_status.get("numberReady", 0)), int(
        ds_status.get("desiredNumberScheduled", 0))

    if step.reason == "ReadyToAggregate":
        with ctx.engine.connect() as conn:
            pod_names = {k.removeprefix("pod:"): v
                         for k, v in db.session_meta(conn, entry.db_id).items()
                         if k.startswith("pod:")}
        status.update(_close_and_aggregate(ctx, entry, body, pod_names))
        step = next_step(Phase.AGGREGATING,
                         Observed(now, end, drain_until, len(targets), ever, aggregated=True))
        status["completionTime"] = iso(ctx.clock())
        _sync_daemonset(ctx, body, [], end)
    elif step.phase is Phase.FAILED:
        db.finish_session(ctx.engine, entry.db_id, "failed")
        _sync_daemonset(ctx, body, [], end)
        status["completionTime"] = iso(now)

    entry.phase = step.phase
    now_iso = iso(now)
    conds = status.get("conditions") or []
    status.update(
        phase=step.phase.value, reason=step.reason, message=step.message,
        nodes=len(nodes), pods=len(targets), everMatched=ever,
        agents={"ready": ready, "expected": expected},
        agentsReady=f"{ready}/{expected}",
        conditions=[
            condition("TargetsResolved", bool(targets),
                      "PodsMatched" if targets else "NoMatchingPods",
                      f"{len(targets)} pod(s) on {len(nodes)} node(s)", now_iso, conds),
            condition("AgentsReady", expected > 0 and ready == expected,
                      "AllReady" if expected and ready == expected else "NotReady",
                      f"{ready}/{expected} agent pods ready", now_iso, conds),
            condition("Completed", step.phase is Phase.COMPLETED,
                      step.reason if step.phase in TERMINAL else "InProgress",
                      step.message, now_iso, conds),
        ],
    )
    if step.phase is Phase.FAILED:
        status.setdefault("topFinding", step.message)
    return status
