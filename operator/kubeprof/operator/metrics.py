"""Prometheus metrics of the operator, on its own registry (served at /metrics)."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from kubeprof.analysis.gpu_idle import IdleFigure
from kubeprof.operator.aggregate import Summary
from kubeprof.protocol.phases import Phase

REGISTRY = CollectorRegistry(auto_describe=True)

GPU_IDLE = Gauge("kubeprof_gpu_idle_ratio",
                 "Share of time a GPU ran no kernel: over the last window (default 60 s) "
                 "while the session runs, over its steady state once it completed",
                 ["namespace", "session", "node", "gpu", "pod"], registry=REGISTRY)
FINDINGS = Gauge("kubeprof_findings", "Findings of a completed session, by kind and severity",
                 ["namespace", "session", "kind", "severity"], registry=REGISTRY)
SESSIONS = Gauge("kubeprof_sessions", "ProfilingSessions known to the operator, by phase",
                 ["phase"], registry=REGISTRY)
INGEST_BATCHES = Counter("kubeprof_ingest_batches_total",
                         "Batches received, by result (stored, duplicate)", ["result"],
                         registry=REGISTRY)
INGEST_ROWS = Counter("kubeprof_ingest_rows_total", "Rows written to the results database",
                      registry=REGISTRY)
INGEST_REJECTIONS = Counter("kubeprof_ingest_rejections_total",
                            "Ingest requests refused, by reason", ["reason"],
                            registry=REGISTRY)
INGEST_PENDING = Gauge("kubeprof_ingest_pending_batches",
                       "Batches received and decoded, waiting for or in a database writer "
                       "(a backlog that stays high means ingest falls behind)",
                       registry=REGISTRY)
RECONCILE_ERRORS = Counter("kubeprof_reconcile_errors_total",
                           "Reconcile passes that failed (retried)", ["stage"],
                           registry=REGISTRY)

def set_phases(counts: dict[str, int]) -> None:
    for p in Phase:
        SESSIONS.labels(phase=p.value).set(counts.get(p.value, 0))


def publish_gpu_idle(namespace: str, session: str, s: Summary,
                     pod_names: dict[str, str]) -> None:
    """One gauge sample per (node, GPU, pod) of the session (pod "" when no pod is known).

    The values are the aggregation's per-GPU figures (`kubeprof.analysis.gpu_idle`: CUPTI
    kernel spans, NVML utilisation only for a GPU on which no kernel was traced).
    """
    for g in s.gpus:
        for uid in g.pods or [""]:
            GPU_IDLE.labels(namespace=namespace, session=session, node=g.node,
                            gpu=str(g.device), pod=pod_names.get(uid, uid)).set(g.idle)


def publish_recent_gpu_idle(namespace: str, session: str,
                            figures: Mapping[str, Mapping[int, IdleFigure]],
                            users: Mapping[tuple[str, int], list[str]],
                            pod_names: Mapping[str, str]) -> None:
    """The rolling "idle now" figure of a running session, per (node, GPU, pod).

    Series of GPUs without a figure in this window are dropped rather than left stale.
    """
    fresh: set[tuple[str, ...]] = set()
    for node, per_dev in figures.items():
        for dev, fig in per_dev.items():
            for uid in users.get((node, dev)) or [""]:
                labels = (namespace, session, node, str(dev), pod_names.get(uid, uid))
                GPU_IDLE.labels(*labels).set(fig.ratio)
                fresh.add(labels)
    for stale in _label_sets(GPU_IDLE, namespace, session):
        if stale not in fresh:
            GPU_IDLE.remove(*stale)


def publish_findings(namespace: str, session: str, s: Summary) -> None:
    """One gauge sample per (kind, severity) of the session's findings."""
    counts = Tally((f.kind.value, f.severity.value) for _, f in s.findings)
    for (kind, severity), n in counts.items():
        FINDINGS.labels(namespace, session, kind, severity).set(n)


def forget_session(namespace: str, session: str) -> None:
    """Drop a deleted session's gauge samples."""
    for labels in _label_sets(GPU_IDLE, namespace, session):
        GPU_IDLE.remove(*labels)
    for labels in _label_sets(FINDINGS, namespace, session):
        FINDINGS.remove(*labels)


def _label_sets(gauge: Gauge, namespace: str, session: str) -> list[tuple[str, ...]]:
    names = gauge._labelnames
    sets = [tuple(s.labels[k] for k in names) for m in gauge.collect() for s in m.samples]
    return [ls for ls in sets if ls[0] == namespace and ls[1] == session]


def render() -> bytes:
    return generate_latest(REGISTRY)
