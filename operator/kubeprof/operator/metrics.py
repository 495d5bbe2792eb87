"""Prometheus metrics of the operator, on its own registry (served at /metrics).

Per-session gauges carry the session's namespace and name, node and pod labels, so their
series count
grows with what users create. It is bounded twice: at most MAX_SESSIONS sessions keep
series per gauge (the session updated longest ago is dropped whole to make room, so
running sessions, refreshed every pass, stay) and at most MAX_SERIES_PER_SESSION series
per session; what does not fit is counted in kubeprof_metrics_series_dropped_total.
A deleted session's series are removed at once.

`kubeprof_gpu_idle_ratio` of a session is its live figure: its series end when the session
ends (completed or failed), so an alert on it resolves with the session; the always-on
signal is the light agent's per-pod series of the same name. A completed session's results
stay on `kubeprof_pod_gpu_idle_ratio` and `kubeprof_findings` (no alert reads them) until
the ProfilingSession is deleted.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections import OrderedDict
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from kubeprof.analysis.gpu_idle import IdleFigure
from kubeprof.operator.aggregate import Summary
from kubeprof.protocol.phases import Phase

REGISTRY = CollectorRegistry(auto_describe=True)

# `pod` is the pod's name and `namespace` its namespace, as on the light agent's series of
# the same name; the session is `session_namespace`/`session` (they differ only for a
# cross-namespace session).
GPU_IDLE = Gauge(
    "kubeprof_gpu_idle_ratio",
    "Share of time a GPU ran no kernel over the last window (default 60 s) "
    "while the session runs; its series end with the session (its final "
    "figures: kubeprof_pod_gpu_idle_ratio and the ProfilingSession's status)",
    ["session_namespace", "session", "namespace", "node", "gpu", "pod"],
    registry=REGISTRY,
)
POD_GPU_IDLE = Gauge(
    "kubeprof_pod_gpu_idle_ratio",
    "A completed session's GPU idle of each pod from its own records: source "
    "cupti (its kernels, where its tracer was on) or nvml (fallback); pods "
    "without data have no sample",
    ["session_namespace", "session", "namespace", "pod", "source"],
    registry=REGISTRY,
)
FINDINGS = Gauge(
    "kubeprof_findings",
    "Findings of a completed session, by kind and severity",
    ["namespace", "session", "kind", "severity"],
    registry=REGISTRY,
)
SESSIONS = Gauge(
    "kubeprof_sessions",
    "ProfilingSessions known to the operator, by phase",
    ["phase"],
    registry=REGISTRY,
)
INGEST_BATCHES = Counter(
    "kubeprof_ingest_batches_total",
    "Batches received, by result (stored, duplicate)",
    ["result"],
    registry=REGISTRY,
)
INGEST_ROWS = Counter(
    "kubeprof_ingest_rows_total", "Rows written to the results database", registry=REGISTRY
)
INGEST_REJECTIONS = Counter(
    "kubeprof_ingest_rejections_total",
    "Ingest requests refused, by reason",
    ["reason"],
    registry=REGISTRY,
)
POD_CLAIMS_DROPPED = Counter(
    "kubeprof_ingest_pod_claims_dropped_total",
    "Process records stored without the pod they named: the API does not list that pod on "
    "the batch's node (the records are kept, the claim is not)",
    registry=REGISTRY,
)
INGEST_PENDING = Gauge(
    "kubeprof_ingest_pending_batches",
    "Batches received and decoded, waiting for or in a database writer "
    "(a backlog that stays high means ingest falls behind)",
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "kubeprof_reconcile_errors_total",
    "Reconcile passes that failed (retried)",
    ["stage"],
    registry=REGISTRY,
)
SERIES_DROPPED = Counter(
    "kubeprof_metrics_series_dropped_total",
    "Per-session series not exported or evicted to bound /metrics (cardinality caps), by metric",
    ["metric"],
    registry=REGISTRY,
)

MAX_SESSIONS = 200  # sessions with series, per gauge
MAX_SERIES_PER_SESSION = 256  # (node, gpu, pod) or (kind, severity) series of one session


class Bounded:
    """A gauge whose first two labels name the session (its namespace, its name), with
    capped cardinality."""

    def __init__(self, gauge: Gauge, name: str) -> None:
        self.gauge, self.name = gauge, name
        self._lock = threading.Lock()
        # (namespace, session) -> its label tuples; order = least recently updated first.
        self._sessions: OrderedDict[tuple[str, str], set[tuple[str, ...]]] = OrderedDict()

    def put(self, labels: tuple[str, ...], value: float) -> bool:
        """Set one series; False when a cap kept it out (counted)."""
        key = (labels[0], labels[1])
        with self._lock:
            series = self._sessions.get(key)
            if series is None:
                while len(self._sessions) >= MAX_SESSIONS:
                    _, old = self._sessions.popitem(last=False)
                    self._drop(old)
                series = self._sessions[key] = set()
            self._sessions.move_to_end(key)
            if labels not in series and len(series) >= MAX_SERIES_PER_SESSION:
                SERIES_DROPPED.labels(metric=self.name).inc()
                return False
            series.add(labels)
            self.gauge.labels(*labels).set(value)
            return True

    def series(self, namespace: str, session: str) -> set[tuple[str, ...]]:
        with self._lock:
            return set(self._sessions.get((namespace, session), ()))

    def remove(self, labels: tuple[str, ...]) -> None:
        with self._lock:
            series = self._sessions.get((labels[0], labels[1]))
            if series is not None and labels in series:
                series.discard(labels)
                self.gauge.remove(*labels)

    def forget(self, namespace: str, session: str) -> None:
        with self._lock:
            series = self._sessions.pop((namespace, session), set())
            for labels in series:
                self.gauge.remove(*labels)

    def _drop(self, series: set[tuple[str, ...]]) -> None:
        for labels in series:
            self.gauge.remove(*labels)
        SERIES_DROPPED.labels(metric=self.name).inc(len(series))


BOUNDED_GPU_IDLE = Bounded(GPU_IDLE, "kubeprof_gpu_idle_ratio")
BOUNDED_FINDINGS = Bounded(FINDINGS, "kubeprof_findings")
BOUNDED_POD_GPU_IDLE = Bounded(POD_GPU_IDLE, "kubeprof_pod_gpu_idle_ratio")


def set_phases(counts: dict[str, int]) -> None:
    for p in Phase:
        SESSIONS.labels(phase=p.value).set(counts.get(p.value, 0))


def pod_labels(namespace: str, pod: str) -> tuple[str, str]:
    """(namespace, pod name) of a recorded `namespace/name` (the session's namespace when
    the record has none, e.g. "" for a GPU no known pod used)."""
    pns, sep, name = pod.partition("/")
    return (pns, name) if sep else (namespace, pod)


def publish_gpu_idle(namespace: str, session: str, s: Summary, pod_names: dict[str, str]) -> None:
    """At the session's end: its live `kubeprof_gpu_idle_ratio` series end, and each pod's
    completed figure (`kubeprof.analysis.gpu_idle`: CUPTI kernel spans, NVML utilisation
    where no kernel was traced) goes to `kubeprof_pod_gpu_idle_ratio`."""
    end_session(namespace, session)
    for uid, sc in s.pods.items():
        if sc.gpu_idle is not None and sc.gpu_idle_source:
            pns, pod = pod_labels(namespace, pod_names.get(uid, uid))
            BOUNDED_POD_GPU_IDLE.put(
                (namespace, session, pns, pod, sc.gpu_idle_source), sc.gpu_idle
            )


def publish_recent_gpu_idle(
    namespace: str,
    session: str,
    figures: Mapping[str, Mapping[int, IdleFigure]],
    users: Mapping[tuple[str, int], list[str]],
    pod_names: Mapping[str, str],
) -> None:
    """The rolling "idle now" figure of a running session, per (node, GPU, pod).

    Series of GPUs without a figure in this window are dropped rather than left stale.
    """
    fresh: set[tuple[str, ...]] = set()
    for node, per_dev in figures.items():
        for dev, fig in per_dev.items():
            if fig.ratio is None:  # no figure: its series is dropped below
                continue
            for uid in users.get((node, dev)) or [""]:
                pns, pod = pod_labels(namespace, pod_names.get(uid, uid))
                labels = (namespace, session, pns, node, str(dev), pod)
                BOUNDED_GPU_IDLE.put(labels, fig.ratio)
                fresh.add(labels)
    for stale in BOUNDED_GPU_IDLE.series(namespace, session) - fresh:
        BOUNDED_GPU_IDLE.remove(stale)


def publish_findings(namespace: str, session: str, s: Summary) -> None:
    """One gauge sample per (kind, severity) of the session's findings."""
    counts = Tally((f.kind.value, f.severity.value) for _, f in s.findings)
    for (kind, severity), n in counts.items():
        BOUNDED_FINDINGS.put((namespace, session, kind, severity), n)


def end_session(namespace: str, session: str) -> None:
    """The session ended (completed or failed): its live GPU idle series end with it."""
    BOUNDED_GPU_IDLE.forget(namespace, session)


def forget_session(namespace: str, session: str) -> None:
    """Drop a deleted session's gauge samples."""
    BOUNDED_GPU_IDLE.forget(namespace, session)
    BOUNDED_FINDINGS.forget(namespace, session)
    BOUNDED_POD_GPU_IDLE.forget(namespace, session)


def render() -> bytes:
    return generate_latest(REGISTRY)
