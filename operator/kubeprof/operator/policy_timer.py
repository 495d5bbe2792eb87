"""The ProfilingPolicy timer: read the light agents' figures, decide, create sessions.

Figures come straight from the light agents' /metrics (no Prometheus needed): each
``--light-agents`` URL is scraped at every address its host resolves to, so one URL of a
headless Service reaches every node's agent.
"""

from __future__ import annotations

import logging
import socket
import urllib.parse
import urllib.request
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from kubeprof.operator.config import GROUP, PLURAL, VERSION
from kubeprof.operator.kube import Kube, KubeError
from kubeprof.operator.policy import (
    POD_ANNOTATION,
    POLICY_LABEL,
    POLICY_PLURAL,
    MadeSession,
    PolicyError,
    decide,
    parse_policy,
    session_body,
)
from kubeprof.operator.session import iso
from kubeprof.protocol.phases import TERMINAL

log = logging.getLogger("kubeprof.operator.policy")


def agent_urls(url: str) -> list[str]:
    """`url` once per address its host resolves to (a headless Service: every agent)."""
    u = urllib.parse.urlsplit(url)
    host, port = u.hostname or "", u.port or 80
    try:
        addrs = sorted({a[4][0] for a in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)})
    except OSError:
        return []
    out = []
    for a in addrs:
        a = str(a)
        netloc = f"[{a}]:{port}" if ":" in a else f"{a}:{port}"
        out.append(urllib.parse.urlunsplit((u.scheme, netloc, u.path or "/metrics", "", "")))
    return out


def scrape(urls: Sequence[str], timeout: float = 5.0) -> dict[tuple[str, str], float]:
    """(namespace, pod) -> worst kubeprof_gpu_idle_ratio over its containers and GPUs."""
    out: dict[tuple[str, str], float] = {}
    for base in urls:
        for url in agent_urls(base):
            try:
                with urllib.request.urlopen(url, timeout=timeout) as r:
                    text = r.read().decode()
            except OSError as exc:
                log.warning("light agent %s unreachable: %s", url, exc)
                continue
            for fam in text_string_to_metric_families(text):
                if fam.name != "kubeprof_gpu_idle_ratio":
                    continue
                for s in fam.samples:
                    key = (s.labels.get("namespace", ""), s.labels.get("pod", ""))
                    out[key] = max(out.get(key, 0.0), float(s.value))
    return out


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def evaluate(kube: Kube, urls: Sequence[str], body: Any, now: float) -> dict[str, Any]:
    """One tick for one policy; returns the new status."""
    ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
    try:
        policy = parse_policy(body.get("spec") or {})
    except PolicyError as exc:
        return {"error": str(exc), "lastEvaluated": iso(now)}
    selector = ",".join(f"{k}={v}" for k, v in sorted(policy.match_labels.items()))
    pods = {p["metadata"]["name"]: p for p in kube.list_pods(ns, selector)}
    figures = scrape(urls)
    idle = {pod: v for (pns, pod), v in figures.items() if pns == ns and pod in pods}
    custom = client.CustomObjectsApi(kube._api())  # same credentials and pool
    listed: Any = custom.list_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, label_selector=f"{POLICY_LABEL}={name}"
    )
    items = listed["items"]
    made = [
        MadeSession(
            s["metadata"]["name"],
            (s["metadata"].get("annotations") or {}).get(POD_ANNOTATION, ""),
            _ts(s["metadata"]["creationTimestamp"]),
            (s.get("status") or {}).get("phase") in TERMINAL,
        )
        for s in items
    ]
    old = (body.get("status") or {}).get("aboveSince") or {}
    decision = decide(policy, now, idle, {p: _ts(t) for p, t in old.items()}, made)
    created = []
    for pod in decision.profile:
        obj = session_body(body, policy, pods[pod], now)
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, obj)
        created.append(obj["metadata"]["name"])
        log.info(
            "policy %s/%s: pod %s idle above %.2f for %gs: created session %s",
            ns,
            name,
            pod,
            policy.idle_above,
            policy.for_s,
            obj["metadata"]["name"],
        )
    for sname in decision.delete:
        try:
            custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, sname)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
    existing = [m for m in made if m.name not in decision.delete]
    newest = max(existing, key=lambda m: (m.created, m.name), default=None)
    return {  # derived from the API's sessions, never counted up from a (possibly stale) body
        "aboveSince": {p: iso(t) for p, t in decision.above_since.items()},
        "held": decision.held,
        "lastEvaluated": iso(now),
        "lastSession": created[-1] if created else (newest.name if newest else ""),
        "sessions": len(existing) + len(created),
        "podsWithFigures": len(idle),
        "error": "",
    }


def register(registry: kopf.OperatorRegistry, urls: Sequence[str], interval_s: float) -> None:
    """The policy timer, only when light agents are configured (they are its only input)."""

    @kopf.timer(
        GROUP,
        VERSION,
        POLICY_PLURAL,
        registry=registry,
        id="policy",
        interval=interval_s,
        initial_delay=0.0,
    )
    def handle_policy(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
        try:
            status = evaluate(memo.ctx.kube, urls, body, datetime.now(UTC).timestamp())
        except (KubeError, client.ApiException, OSError) as exc:
            raise kopf.TemporaryError(f"policy tick failed: {exc}", delay=interval_s) from exc
        old = body.get("status") or {}
        for key, value in status.items():
            if old.get(key) != value:
                patch.status[key] = value
        now_above = status.get("aboveSince") or {}
        if old.get("aboveSince"):  # drop pods whose idle fell: a merge patch nulls them out
            gone = {p: None for p in old["aboveSince"] if p not in now_above}
            if gone:
                patch.status["aboveSince"] = {**now_above, **gone}
