"""Operator settings: one object, one comment per setting, filled from flags and environment.

`OperatorConfig` is the only place an operator default lives. A setting given on the
command line says so in its field's metadata (`flag`: the flag, its environment variable
and its help); flags.py builds the parser from those and fills the object back from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from kubeprof.protocol.limits import IngestLimits
from kubeprof.protocol.settings import DEFAULT_SPOOL_DIR

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


# Defaults that another object of the operator repeats as its own default.
DEFAULT_PULL_POLICY = "IfNotPresent"  # agent pods and the injection's init container
DEFAULT_SOCKET_HOST_PATH = "/run/kubeprof"  # node folder of the GPU tracer sockets
DEFAULT_DRAIN_S = 15.0  # late batches after a session's end (reconcile and ingest)
DEFAULT_INGEST_WRITERS = 2
DEFAULT_LIGHT_STALE_S = 20.0  # light agent heartbeat age before its nodes fall back
DEFAULT_LIGHT_GRACE_S = 15.0  # placement held after a start while light agents call in
AGENT_AUTH = ("serviceaccount", "session-token")  # --agent-auth (agent_identity.py)
UI_ACCESS = ("port-forward", "any", "off")  # who may read the web UI (ui_routes.py)
DEFAULT_UI_ACCESS = UI_ACCESS[0]


@dataclass(frozen=True, slots=True)
class Flag:
    """How one setting is given: its flag, its environment variable, its help (`{env}` in
    the help is replaced by the variable, `%(default)s` by argparse), and for settings that
    are not plain text, numbers or switches, how the text becomes the value."""

    name: str
    env: str
    help: str
    choices: tuple[str, ...] = ()
    # "json-list" / "json-object": JSON text; "repeat": repeatable flag, comma-separated
    # in the environment; "comma": one comma-separated flag value.
    form: str = ""


def flag(name: str, env: str, help_text: str, **kw: Any) -> dict[str, Flag]:
    """Field metadata of a setting given on the command line."""
    return {"flag": Flag(name, env, help_text, **kw)}


@dataclass(frozen=True)
class OperatorConfig:
    """What the operator needs to know about its environment."""

    # The flagged fields share one shape on purpose: each is a row of the flag table.
    # SQLAlchemy URL of the results database (postgresql+psycopg://...; sqlite:/// in tests).
    database_url: str = field(
        metadata=flag(
            "--database-url",
            "KUBEPROF_DATABASE_URL",
            "SQLAlchemy URL of the results database, e.g. postgresql+psycopg://"
            "USER:PASS@HOST:5432/DB; migrated on start (env {env})",
        )
    )
    # Address the ingest API and /metrics listen on, HOST:PORT.
    listen: str = field(
        default="0.0.0.0:8080",
        metadata=flag(
            "--listen",
            "KUBEPROF_LISTEN",
            "HOST:PORT of the ingest API, /metrics and /healthz (env {env}, default %(default)s)",
        ),
    )
    # URL agents use to reach the ingest API (the operator Service), written into the DaemonSet.
    ingest_url: str = field(
        default="http://kubeprof-operator.kubeprof.svc:8080",
        metadata=flag(
            "--ingest-url",
            "KUBEPROF_INGEST_URL",
            "URL agents use to reach the ingest API, written into each agent "
            "DaemonSet (env {env}, default %(default)s)",
        ),
    )
    # Image the agent DaemonSet runs (it must contain `kubeprof agent`).
    agent_image: str = field(
        default_factory=lambda: default_image("agent"),
        metadata=flag(
            "--agent-image",
            "KUBEPROF_AGENT_IMAGE",
            "image of the agent pods; must provide `kubeprof agent` (env "
            "{env}, default %(default)s)",
        ),
    )
    # ServiceAccount for agent pods ("" = the namespace default; agents need no API rights).
    agent_service_account: str = field(
        default="",
        metadata=flag(
            "--agent-service-account",
            "KUBEPROF_AGENT_SERVICE_ACCOUNT",
            "ServiceAccount of agent pods; agents need no API rights (env "
            "{env}, default: the namespace default)",
        ),
    )
    # How agents prove who they are to the ingest API (agent_identity.py). "serviceaccount":
    # each agent pod sends its projected, pod-bound ServiceAccount token (audience
    # kubeprof.dev/ingest), checked with TokenReview and bound to the pod's node; the
    # session's shared token is then accepted only from light agents on the nodes handed
    # to them. "session-token": the shared per-session token only, for clusters where
    # TokenReview or projected tokens are not available (any holder may send for any node).
    agent_auth: str = field(
        default=AGENT_AUTH[0],
        metadata=flag(
            "--agent-auth",
            "KUBEPROF_AGENT_AUTH",
            "how agents authenticate: serviceaccount (each agent pod's projected "
            "ServiceAccount token, checked with TokenReview and bound to its pod and node; "
            "needs `create tokenreviews`) or session-token (the session's shared token, "
            "only where TokenReview is unavailable) (env {env}, default %(default)s)",
            choices=AGENT_AUTH,
        ),
    )
    agent_image_pull_policy: str = field(
        default=DEFAULT_PULL_POLICY,
        metadata=flag(
            "--agent-image-pull-policy",
            "KUBEPROF_AGENT_IMAGE_PULL_POLICY",
            "imagePullPolicy of the agent pods (env {env}, default %(default)s)",
            choices=("Always", "IfNotPresent", "Never"),
        ),
    )
    # Agent container resources (requests = limits for CPU keeps overhead predictable).
    agent_cpu: str = field(
        default="500m",
        metadata=flag(
            "--agent-cpu",
            "KUBEPROF_AGENT_CPU",
            "CPU request and limit of each agent (env {env}, default %(default)s)",
        ),
    )
    agent_memory: str = field(
        default="512Mi",
        metadata=flag(
            "--agent-memory",
            "KUBEPROF_AGENT_MEMORY",
            "memory request and limit of each agent (env {env}, default %(default)s)",
        ),
    )
    # Host folder where agents spool batches while the ingest API is unreachable (the same
    # path as the agent's own spool folder, which the DaemonSet mounts it at).
    agent_spool_host_path: str = field(
        default=str(DEFAULT_SPOOL_DIR),
        metadata=flag(
            "--agent-spool-host-path",
            "KUBEPROF_AGENT_SPOOL_HOST_PATH",
            "host folder where agents spool batches while the ingest API is "
            "unreachable (env {env}, default %(default)s)",
        ),
    )
    # Agent pod tolerations; None = tolerate every taint (GPU nodes are often tainted).
    agent_tolerations: tuple[dict[str, Any], ...] | None = field(
        default=None,
        metadata=flag(
            "--agent-tolerations",
            "KUBEPROF_AGENT_TOLERATIONS",
            "JSON list of the agent pods' tolerations (env {env}; default: tolerate every taint)",
            form="json-list",
        ),
    )
    # PriorityClass of agent pods ("" = none).
    agent_priority_class: str = field(
        default="",
        metadata=flag(
            "--agent-priority-class",
            "KUBEPROF_AGENT_PRIORITY_CLASS",
            "PriorityClass of the agent pods (env {env}; default none)",
        ),
    )
    # The agent container's whole securityContext, replacing the built-in one (None = built-in).
    agent_security_context: dict[str, Any] | None = field(
        default=None,
        metadata=flag(
            "--agent-security-context",
            "KUBEPROF_AGENT_SECURITY_CONTEXT",
            "JSON object replacing the agent container's securityContext (env "
            "{env}; default: the built-in one, not "
            "privileged, only the capabilities eBPF sampling needs)",
            form="json-object",
        ),
    )
    # Most nodes one agent DaemonSet pins (a session on more nodes gets several, see
    # shards.py): 500 names of up to 253 characters keep a DaemonSet under 256 kB.
    agent_shard_nodes: int = field(
        default=500,
        metadata=flag(
            "--agent-shard-nodes",
            "KUBEPROF_AGENT_SHARD_NODES",
            "most nodes one agent DaemonSet pins; a session on more nodes gets "
            "several DaemonSets, so no object grows with the cluster (env "
            "{env}, default %(default)s: under 256 kB even "
            "with 253-character node names)",
        ),
    )
    # Namespaces to watch; empty = all namespaces.
    namespaces: tuple[str, ...] = field(
        default_factory=tuple,
        metadata=flag(
            "--namespace",
            "KUBEPROF_WATCH_NAMESPACES",
            "watch ProfilingSessions only in this namespace (repeatable; env "
            "{env}, comma-separated; default: all)",
            form="repeat",
        ),
    )
    # Seconds between reconcile passes of a session (re-resolve pods, agents, phase).
    reconcile_interval_s: float = field(
        default=5.0,
        metadata=flag(
            "--reconcile-interval",
            "KUBEPROF_RECONCILE_INTERVAL_S",
            "seconds between reconcile passes of a session: re-resolve pods, "
            "re-pin agents, advance the phase (env {env}, "
            "default %(default)s)",
        ),
    )
    # Seconds after the session's end during which late batches are still accepted.
    drain_s: float = field(
        default=DEFAULT_DRAIN_S,
        metadata=flag(
            "--drain",
            "KUBEPROF_DRAIN_S",
            "seconds after a session's end during which late batches are "
            "accepted before aggregation (env {env}, default "
            "%(default)s)",
        ),
    )
    # Window of the rolling `kubeprof_gpu_idle_ratio` of a running session ("idle now").
    gpu_idle_window_s: float = field(
        default=60.0,
        metadata=flag(
            "--gpu-idle-window",
            "KUBEPROF_GPU_IDLE_WINDOW_S",
            "seconds of the rolling kubeprof_gpu_idle_ratio of a running session, "
            "so an alert on it means idle now (env {env}, "
            "default %(default)s)",
        ),
    )
    # Threads writing batches to the database concurrently.
    ingest_writers: int = field(
        default=DEFAULT_INGEST_WRITERS,
        metadata=flag(
            "--ingest-writers",
            "KUBEPROF_INGEST_WRITERS",
            "threads writing batches to the database concurrently (env {env}, default %(default)s)",
        ),
    )
    # Let sessions target pods in other namespaces (their creator must be allowed to list
    # pods there, checked by the admission policy in crds/profilingsession-admission.yaml).
    allow_cross_namespace: bool = field(
        default=False,
        metadata=flag(
            "--allow-cross-namespace",
            "KUBEPROF_ALLOW_CROSS_NAMESPACE",
            "let a session profile pods in another namespace when its creator "
            "may list pods there (needs crds/profilingsession-admission.yaml "
            "installed; env {env}=1; default: off)",
        ),
    )
    # The agent's seccomp profile: RuntimeDefault (current containerd allows bpf/perf_event_open
    # with CAP_BPF/CAP_PERFMON), or Unconfined for runtimes whose default needs SYS_ADMIN.
    agent_seccomp: str = field(
        default="RuntimeDefault",
        metadata=flag(
            "--agent-seccomp",
            "KUBEPROF_AGENT_SECCOMP",
            "seccomp profile of agent pods; Unconfined only for runtimes whose "
            "default profile refuses bpf()/perf_event_open() without SYS_ADMIN "
            "(env {env}, default %(default)s)",
            choices=("RuntimeDefault", "Unconfined"),
        ),
    )
    # Who may read the web UI on the ingest port.
    ui_access: str = field(
        default=DEFAULT_UI_ACCESS,
        metadata=flag(
            "--ui-access",
            "KUBEPROF_UI_ACCESS",
            "who may read the web UI on the same port: port-forward (only "
            "connections from the pod's loopback, i.e. kubectl port-forward), any "
            "(behind an Ingress with your own auth) or off (env {env}, "
            "default %(default)s)",
            choices=UI_ACCESS,
        ),
    )
    # The tracer-injection webhook: served over TLS only when a certificate is given.
    webhook_listen: str = field(
        default="0.0.0.0:9443",
        metadata=flag(
            "--webhook-listen",
            "KUBEPROF_WEBHOOK_LISTEN",
            "HOST:PORT of the tracer-injection webhook, served over TLS only when "
            "--webhook-tls-cert is set (env {env}, default "
            "%(default)s)",
        ),
    )
    webhook_tls_cert: str = field(
        default="",
        metadata=flag(
            "--webhook-tls-cert",
            "KUBEPROF_WEBHOOK_TLS_CERT",
            "PEM serving certificate of the injection webhook; unset: no webhook (env {env})",
        ),
    )
    webhook_tls_key: str = field(
        default="",
        metadata=flag(
            "--webhook-tls-key",
            "KUBEPROF_WEBHOOK_TLS_KEY",
            "PEM key of --webhook-tls-cert (env {env})",
        ),
    )
    webhook_socket_host_path: str = field(
        default=DEFAULT_SOCKET_HOST_PATH,
        metadata=flag(
            "--webhook-socket-host-path",
            "KUBEPROF_WEBHOOK_SOCKET_HOST_PATH",
            "node folder of the GPU tracer sockets: its rx/ sub-folder holds one "
            "receiver per session (kernelTracing) agent and is mounted read-only "
            "into injected pods (env {env}, default "
            "%(default)s)",
        ),
    )
    # Bounds of one ingest request: one --ingest-max-* flag each (ingest_flags.py).
    ingest_limits: IngestLimits = field(default_factory=IngestLimits)
    # /metrics URLs of the light agents; any enables ProfilingPolicy.
    light_agents: tuple[str, ...] = field(
        default_factory=tuple,
        metadata=flag(
            "--light-agents",
            "KUBEPROF_LIGHT_AGENTS",
            "comma-separated /metrics URLs of the light agents (a headless "
            "Service's URL reaches every address it resolves to); enables "
            "ProfilingPolicy (env {env})",
            form="comma",
        ),
    )
    policy_interval_s: float = field(
        default=30.0,
        metadata=flag(
            "--policy-interval",
            "KUBEPROF_POLICY_INTERVAL_S",
            "seconds between ProfilingPolicy evaluations (env {env}, default %(default)s)",
        ),
    )
    metrics_token_file: str = field(
        default="",
        metadata=flag(
            "--metrics-token-file",
            "KUBEPROF_METRICS_TOKEN_FILE",
            "file holding a bearer token /metrics requires (its series name "
            "sessions, namespaces and pods); Prometheus sends it with "
            "`authorization: {credentials: ...}` (env {env}; "
            "default: /metrics open to whoever reaches the port)",
        ),
    )
    light_token_file: str = field(
        default="",
        metadata=flag(
            "--light-token-file",
            "KUBEPROF_LIGHT_TOKEN_FILE",
            "file holding the light agents' shared token; set: light agents "
            "started with --deep profile sessions on their nodes instead of a "
            "per-session DaemonSet pod (env {env}; default off)",
        ),
    )
    light_stale_s: float = field(
        default=DEFAULT_LIGHT_STALE_S,
        metadata=flag(
            "--light-stale",
            "KUBEPROF_LIGHT_STALE_S",
            "seconds without a heartbeat after which a light agent's nodes go back "
            "to the per-session DaemonSet (env {env}, default "
            "%(default)s)",
        ),
    )
    light_grace_s: float = field(
        default=DEFAULT_LIGHT_GRACE_S,
        metadata=flag(
            "--light-grace",
            "KUBEPROF_LIGHT_GRACE_S",
            "seconds after a start during which placement is left as it was, "
            "while light agents call in (env {env}, default "
            "%(default)s)",
        ),
    )
    kubeconfig: str = field(
        default="",
        metadata=flag(
            "--kubeconfig",
            "KUBECONFIG",
            "kubeconfig file when not running in a cluster (env {env})",
        ),
    )
    verbose: bool = field(
        default=False,
        metadata=flag("--verbose", "KUBEPROF_VERBOSE", "log every handler run (env {env}=1)"),
    )
    # Linux capabilities the agent adds (all others dropped): BPF and PERFMON to load and
    # attach the perf-event sampler, SYS_PTRACE to read other processes' memory and maps
    # (py-spy, symbolization). SYS_RESOURCE (raise RLIMIT_MEMLOCK) is added by the builder
    # only for nodes with kernels older than 5.11, which charge BPF maps to memlock.
    agent_capabilities: tuple[str, ...] = ("BPF", "PERFMON", "SYS_PTRACE")
    # Node folder of the injected GPU tracers' sockets (the webhook's --webhook-socket-host-path;
    # set only while the webhook is served). Sessions with kernelTracing mount its rx/ folder
    # into their agents, which listen there and switch the selected pods' tracers on.
    # "" = no injection: agents switch no tracer.
    agent_gpu_socket_host_path: str = ""
    # Passes in a row the session-end aggregation may fail (a bug, or data it cannot hold
    # in memory) before the session is Failed with the reason and its agents and Secret
    # are removed; a database outage is waited out instead and does not count.
    aggregation_attempts: int = 3
    # How many top CPU stacks go into .status (the CR must stay small).
    status_top_stacks: int = 5
    # How many nodes / pods get their own line in .status.summary.
    status_top_targets: int = 5

    @property
    def listen_host(self) -> str:
        return self.listen.rpartition(":")[0] or "0.0.0.0"

    @property
    def listen_port(self) -> int:
        return int(self.listen.rpartition(":")[2])
