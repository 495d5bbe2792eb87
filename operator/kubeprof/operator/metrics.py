"""Prometheus metrics of the operator, on its own registry (served at /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from kubeprof.operator.aggregate import Summary
from kubeprof.protocol.phases import Phase

REGISTRY = CollectorRegistry(auto_describe=True)

GPU_IDLE = Gauge("kubeprof_gpu_idle_ratio",
                 "Fraction of a profiled session during which a GPU ran no kernel",
                 ["namespace", "session", "node", "gpu", "pod"], registry=REGISTRY)
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


def forget_session(namespace: str, session: str) -> None:
    """Drop a deleted session's gauge samples."""
    for labels in list(_label_sets(GPU_IDLE)):
        if labels[0] == namespace and labels[1] == session:
            GPU_IDLE.remove(*labels)


def _label_sets(gauge: Gauge) -> list[tuple[str, ...]]:
    return [tuple(s.labels[k] for k in ("namespace", "session", "node", "gpu", "pod"))
            for m in gauge.collect() for s in m.samples]


def render() -> bytes:
    return generate_latest(REGISTRY)
