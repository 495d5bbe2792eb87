"""Operator settings: one object, one comment per setting, filled from flags and environment."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

GROUP = "kubeprof.dev"
VERSION = "v1alpha1"
PLURAL = "profilingsessions"
KIND = "ProfilingSession"
LABEL_SESSION = "kubeprof.dev/session"  # on every child object: the owning session's name
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_SHARD = "kubeprof.dev/agent-shard"  # on agent DaemonSets and pods: the shard's index
TOKEN_KEY = "token"  # key of the ingest token inside the session's Secret
# One image name scheme: <IMAGE_REPO>/kubeprof-<component>:<version>, as the chart's values,
# scripts/build_images.sh (`make images`) and this default agent image spell it.
IMAGE_REPO = "ghcr.io/kubeprof"


def release() -> str:
    """This package's version: pyproject.toml's, which the chart's appVersion repeats (a unit
    test holds them equal), so image tags follow the one release number."""
    try:
        return version("kubeprof")
    except PackageNotFoundError:  # a source tree on sys.path without an install
        return "0.0.0"


def default_image(component: str) -> str:
    """The released image of `component` ("operator" or "agent") under the one scheme."""
    return f"{IMAGE_REPO}/kubeprof-{component}:{release()}"


@dataclass(frozen=True)
class OperatorConfig:
    """What the operator needs to know about its environment."""

    # SQLAlchemy URL of the results database (postgresql+psycopg://...; sqlite:/// in tests).
    database_url: str
    # Address the ingest API and /metrics listen on.
    listen_host: str = "0.0.0.0"
    listen_port: int = 8080
    # URL agents use to reach the ingest API (the operator Service), written into the DaemonSet.
    ingest_url: str = "http://kubeprof-operator.kubeprof.svc:8080"
    # Image the agent DaemonSet runs (it must contain `kubeprof agent`).
    agent_image: str = field(default_factory=lambda: default_image("agent"))
    agent_image_pull_policy: str = "IfNotPresent"
    # ServiceAccount for agent pods ("" = the namespace default; agents need no API rights).
    agent_service_account: str = ""
    # Linux capabilities the agent adds (all others dropped): BPF and PERFMON to load and
    # attach the perf-event sampler, SYS_PTRACE to read other processes' memory and maps
    # (py-spy, symbolization). SYS_RESOURCE (raise RLIMIT_MEMLOCK) is added by the builder
    # only for nodes with kernels older than 5.11, which charge BPF maps to memlock.
    agent_capabilities: tuple[str, ...] = ("BPF", "PERFMON", "SYS_PTRACE")
    # The agent's seccomp profile: RuntimeDefault (current containerd allows bpf/perf_event_open
    # with CAP_BPF/CAP_PERFMON), or Unconfined for runtimes whose default needs SYS_ADMIN.
    agent_seccomp: str = "RuntimeDefault"
    # Let sessions target pods in other namespaces (their creator must be allowed to list
    # pods there, checked by the admission policy in crds/profilingsession-admission.yaml).
    allow_cross_namespace: bool = False
    # Agent container resources (requests = limits for CPU keeps overhead predictable).
    agent_cpu: str = "500m"
    agent_memory: str = "512Mi"
    # Host folder where agents spool batches while the ingest API is unreachable.
    agent_spool_host_path: str = "/var/lib/kubeprof/spool"
    # Agent pod tolerations; None = tolerate every taint (GPU nodes are often tainted).
    agent_tolerations: tuple[dict[str, Any], ...] | None = None
    # PriorityClass of agent pods ("" = none).
    agent_priority_class: str = ""
    # The agent container's whole securityContext, replacing the built-in one (None = built-in).
    agent_security_context: dict[str, Any] | None = None
    # Node folder of the injected GPU tracers' sockets (the webhook's --webhook-socket-host-path;
    # set only while the webhook is served). Sessions with kernelTracing mount its rx/ folder
    # into their agents, which listen there and switch the selected pods' tracers on.
    # "" = no injection: agents switch no tracer.
    agent_gpu_socket_host_path: str = ""
    # Most nodes one agent DaemonSet pins (a session on more nodes gets several, see
    # shards.py): 500 names of up to 253 characters keep a DaemonSet under 256 kB.
    agent_shard_nodes: int = 500
    # Seconds between reconcile passes of a session (re-resolve pods, agents, phase).
    reconcile_interval_s: float = 5.0
    # Window of the rolling `kubeprof_gpu_idle_ratio` of a running session ("idle now").
    gpu_idle_window_s: float = 60.0
    # Seconds after the session's end during which late batches are still accepted.
    drain_s: float = 15.0
    # Passes in a row the session-end aggregation may fail (a bug, or data it cannot hold
    # in memory) before the session is Failed with the reason and its agents and Secret
    # are removed; a database outage is waited out instead and does not count.
    aggregation_attempts: int = 3
    # How many top CPU stacks go into .status (the CR must stay small).
    status_top_stacks: int = 5
    # How many nodes / pods get their own line in .status.summary.
    status_top_targets: int = 5
    # Threads writing batches to the database concurrently.
    ingest_writers: int = 2
    # Namespaces to watch; empty = all namespaces.
    namespaces: tuple[str, ...] = field(default_factory=tuple)
