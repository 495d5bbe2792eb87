"""`kubeprof operator`: reconcile ProfilingSessions, serve the ingest API (what the chart runs)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kubeprof.operator import ingest_flags
from kubeprof.operator.config import OperatorConfig, default_image
from kubeprof.safe_text import escape_logs

DESCRIPTION = """\
Run the kubeprof operator against the current kubeconfig (or the in-cluster
ServiceAccount). It watches ProfilingSession resources, creates each session's agent
DaemonSet on the nodes of the selected pods, serves the ingest API the agents push to
(plus Prometheus /metrics, /healthz and the read-only web UI on the same port), stores
everything in the results database and writes a summary into each session's .status.

Each flag falls back to the environment variable named in its help, then to the default.
"""

EPILOG = """\
example (development, against a local cluster and Postgres):
  kubeprof operator --database-url postgresql+psycopg://kubeprof@127.0.0.1:5432/kubeprof \\
      --listen 127.0.0.1:8080 --ingest-url http://127.0.0.1:8080
"""


def _env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kubeprof operator",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--database-url",
        default=_env("KUBEPROF_DATABASE_URL"),
        help="SQLAlchemy URL of the results database, e.g. postgresql+psycopg://"
        "USER:PASS@HOST:5432/DB; migrated on start (env KUBEPROF_DATABASE_URL)",
    )
    p.add_argument(
        "--listen",
        default=_env("KUBEPROF_LISTEN", "0.0.0.0:8080"),
        help="HOST:PORT of the ingest API, /metrics and /healthz (env "
        "KUBEPROF_LISTEN, default %(default)s)",
    )
    p.add_argument(
        "--ingest-url",
        default=_env("KUBEPROF_INGEST_URL", "http://kubeprof-operator.kubeprof.svc:8080"),
        help="URL agents use to reach the ingest API, written into each agent "
        "DaemonSet (env KUBEPROF_INGEST_URL, default %(default)s)",
    )
    p.add_argument(
        "--agent-image",
        default=_env("KUBEPROF_AGENT_IMAGE", default_image("agent")),
        help="image of the agent pods; must provide `kubeprof agent` (env "
        "KUBEPROF_AGENT_IMAGE, default %(default)s)",
    )
    p.add_argument(
        "--agent-service-account",
        default=_env("KUBEPROF_AGENT_SERVICE_ACCOUNT"),
        help="ServiceAccount of agent pods; agents need no API rights (env "
        "KUBEPROF_AGENT_SERVICE_ACCOUNT, default: the namespace default)",
    )
    p.add_argument(
        "--agent-image-pull-policy",
        default=_env("KUBEPROF_AGENT_IMAGE_PULL_POLICY", "IfNotPresent"),
        choices=["Always", "IfNotPresent", "Never"],
        help="imagePullPolicy of the agent pods (env KUBEPROF_AGENT_IMAGE_PULL_POLICY, "
        "default %(default)s)",
    )
    p.add_argument(
        "--agent-cpu",
        default=_env("KUBEPROF_AGENT_CPU", "500m"),
        help="CPU request and limit of each agent (env KUBEPROF_AGENT_CPU, default %(default)s)",
    )
    p.add_argument(
        "--agent-memory",
        default=_env("KUBEPROF_AGENT_MEMORY", "512Mi"),
        help="memory request and limit of each agent (env KUBEPROF_AGENT_MEMORY, "
        "default %(default)s)",
    )
    p.add_argument(
        "--agent-spool-host-path",
        default=_env("KUBEPROF_AGENT_SPOOL_HOST_PATH", "/var/lib/kubeprof/spool"),
        help="host folder where agents spool batches while the ingest API is "
        "unreachable (env KUBEPROF_AGENT_SPOOL_HOST_PATH, default %(default)s)",
    )
    p.add_argument(
        "--agent-tolerations",
        default=_env("KUBEPROF_AGENT_TOLERATIONS"),
        help="JSON list of the agent pods' tolerations (env "
        "KUBEPROF_AGENT_TOLERATIONS; default: tolerate every taint)",
    )
    p.add_argument(
        "--agent-priority-class",
        default=_env("KUBEPROF_AGENT_PRIORITY_CLASS"),
        help="PriorityClass of the agent pods (env KUBEPROF_AGENT_PRIORITY_CLASS; default none)",
    )
    p.add_argument(
        "--agent-security-context",
        default=_env("KUBEPROF_AGENT_SECURITY_CONTEXT"),
        help="JSON object replacing the agent container's securityContext (env "
        "KUBEPROF_AGENT_SECURITY_CONTEXT; default: the built-in one, not "
        "privileged, only the capabilities eBPF sampling needs)",
    )
    p.add_argument(
        "--agent-shard-nodes",
        type=int,
        default=int(_env("KUBEPROF_AGENT_SHARD_NODES", "500")),
        help="most nodes one agent DaemonSet pins; a session on more nodes gets "
        "several DaemonSets, so no object grows with the cluster (env "
        "KUBEPROF_AGENT_SHARD_NODES, default %(default)s: under 256 kB even "
        "with 253-character node names)",
    )
    p.add_argument(
        "--namespace",
        action="append",
        default=[n for n in _env("KUBEPROF_WATCH_NAMESPACES").split(",") if n],
        help="watch ProfilingSessions only in this namespace (repeatable; env "
        "KUBEPROF_WATCH_NAMESPACES, comma-separated; default: all)",
    )
    p.add_argument(
        "--reconcile-interval",
        type=float,
        default=float(_env("KUBEPROF_RECONCILE_INTERVAL_S", "5")),
        help="seconds between reconcile passes of a session: re-resolve pods, "
        "re-pin agents, advance the phase (env KUBEPROF_RECONCILE_INTERVAL_S, "
        "default %(default)s)",
    )
    p.add_argument(
        "--drain",
        type=float,
        default=float(_env("KUBEPROF_DRAIN_S", "15")),
        help="seconds after a session's end during which late batches are "
        "accepted before aggregation (env KUBEPROF_DRAIN_S, default "
        "%(default)s)",
    )
    p.add_argument(
        "--gpu-idle-window",
        type=float,
        default=float(_env("KUBEPROF_GPU_IDLE_WINDOW_S", "60")),
        help="seconds of the rolling kubeprof_gpu_idle_ratio of a running session, "
        "so an alert on it means idle now (env KUBEPROF_GPU_IDLE_WINDOW_S, "
        "default %(default)s)",
    )
    p.add_argument(
        "--ingest-writers",
        type=int,
        default=int(_env("KUBEPROF_INGEST_WRITERS", "2")),
        help="threads writing batches to the database concurrently (env "
        "KUBEPROF_INGEST_WRITERS, default %(default)s)",
    )
    p.add_argument(
        "--allow-cross-namespace",
        action="store_true",
        default=_env("KUBEPROF_ALLOW_CROSS_NAMESPACE") not in ("", "0"),
        help="let a session profile pods in another namespace when its creator "
        "may list pods there (needs crds/profilingsession-admission.yaml "
        "installed; env KUBEPROF_ALLOW_CROSS_NAMESPACE=1; default: off)",
    )
    p.add_argument(
        "--agent-seccomp",
        choices=("RuntimeDefault", "Unconfined"),
        default=_env("KUBEPROF_AGENT_SECCOMP", "RuntimeDefault"),
        help="seccomp profile of agent pods; Unconfined only for runtimes whose "
        "default profile refuses bpf()/perf_event_open() without SYS_ADMIN "
        "(env KUBEPROF_AGENT_SECCOMP, default %(default)s)",
    )
    p.add_argument(
        "--ui-access",
        choices=("port-forward", "any", "off"),
        default=_env("KUBEPROF_UI_ACCESS", "port-forward"),
        help="who may read the web UI on the same port: port-forward (only "
        "connections from the pod's loopback, i.e. kubectl port-forward), any "
        "(behind an Ingress with your own auth) or off (env KUBEPROF_UI_ACCESS, "
        "default %(default)s)",
    )
    p.add_argument(
        "--webhook-listen",
        default=_env("KUBEPROF_WEBHOOK_LISTEN", "0.0.0.0:9443"),
        help="HOST:PORT of the tracer-injection webhook, served over TLS only when "
        "--webhook-tls-cert is set (env KUBEPROF_WEBHOOK_LISTEN, default "
        "%(default)s)",
    )
    p.add_argument(
        "--webhook-tls-cert",
        default=_env("KUBEPROF_WEBHOOK_TLS_CERT"),
        help="PEM serving certificate of the injection webhook; unset: no webhook "
        "(env KUBEPROF_WEBHOOK_TLS_CERT)",
    )
    p.add_argument(
        "--webhook-tls-key",
        default=_env("KUBEPROF_WEBHOOK_TLS_KEY"),
        help="PEM key of --webhook-tls-cert (env KUBEPROF_WEBHOOK_TLS_KEY)",
    )
    p.add_argument(
        "--webhook-socket-host-path",
        default=_env("KUBEPROF_WEBHOOK_SOCKET_HOST_PATH", "/run/kubeprof"),
        help="node folder of the GPU tracer sockets: its rx/ sub-folder holds one "
        "receiver per session (kernelTracing) agent and is mounted read-only "
        "into injected pods (env KUBEPROF_WEBHOOK_SOCKET_HOST_PATH, default "
        "%(default)s)",
    )
    ingest_flags.add(p)
    p.add_argument(
        "--light-agents",
        default=_env("KUBEPROF_LIGHT_AGENTS"),
        help="comma-separated /metrics URLs of the light agents (a headless "
        "Service's URL reaches every address it resolves to); enables "
        "ProfilingPolicy (env KUBEPROF_LIGHT_AGENTS)",
    )
    p.add_argument(
        "--policy-interval",
        type=float,
        default=float(_env("KUBEPROF_POLICY_INTERVAL_S", "30")),
        help="seconds between ProfilingPolicy evaluations (env "
        "KUBEPROF_POLICY_INTERVAL_S, default %(default)s)",
    )
    p.add_argument(
        "--metrics-token-file",
        default=_env("KUBEPROF_METRICS_TOKEN_FILE"),
        help="file holding a bearer token /metrics requires (its series name "
        "sessions, namespaces and pods); Prometheus sends it with "
        "`authorization: {credentials: ...}` (env KUBEPROF_METRICS_TOKEN_FILE; "
        "default: /metrics open to whoever reaches the port)",
    )
    p.add_argument(
        "--light-token-file",
        default=_env("KUBEPROF_LIGHT_TOKEN_FILE"),
        help="file holding the light agents' shared token; set: light agents "
        "started with --deep profile sessions on their nodes instead of a "
        "per-session DaemonSet pod (env KUBEPROF_LIGHT_TOKEN_FILE; default off)",
    )
    p.add_argument(
        "--light-stale",
        type=float,
        default=float(_env("KUBEPROF_LIGHT_STALE_S", "20")),
        help="seconds without a heartbeat after which a light agent's nodes go back "
        "to the per-session DaemonSet (env KUBEPROF_LIGHT_STALE_S, default "
        "%(default)s)",
    )
    p.add_argument(
        "--light-grace",
        type=float,
        default=float(_env("KUBEPROF_LIGHT_GRACE_S", "15")),
        help="seconds after a start during which placement is left as it was, "
        "while light agents call in (env KUBEPROF_LIGHT_GRACE_S, default "
        "%(default)s)",
    )
    p.add_argument(
        "--kubeconfig",
        default=_env("KUBECONFIG") or None,
        help="kubeconfig file when not running in a cluster (env KUBECONFIG)",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        default=_env("KUBEPROF_VERBOSE") not in ("", "0"),
        help="log every handler run (env KUBEPROF_VERBOSE=1)",
    )
    return p


def _json_arg(text: str, kind: type, flag: str) -> Any:
    """A JSON flag value of the expected type, None when empty; ValueError names the flag."""
    if not text.strip():
        return None
    want = "list of objects" if kind is list else "object"
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{flag} is not valid JSON ({exc.msg} at character {exc.pos}); pass a JSON {want}"
        ) from None
    if not isinstance(value, kind) or (
        isinstance(value, list) and not all(isinstance(v, dict) for v in value)
    ):
        raise ValueError(f"{flag} must be a JSON {want}, got {text[:80]!r}")
    return value


def build_config(args: argparse.Namespace) -> OperatorConfig:
    """The operator's settings from parsed flags; ValueError names a bad flag."""
    host, _, port = args.listen.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"--listen wants HOST:PORT, got {args.listen!r}")
    if args.agent_shard_nodes < 1:
        raise ValueError(f"--agent-shard-nodes must be at least 1, got {args.agent_shard_nodes}")
    tolerations = _json_arg(args.agent_tolerations, list, "--agent-tolerations")
    security = _json_arg(args.agent_security_context, dict, "--agent-security-context")
    return OperatorConfig(
        database_url=args.database_url,
        listen_host=host or "0.0.0.0",
        listen_port=int(port),
        ingest_url=args.ingest_url,
        agent_image=args.agent_image,
        agent_service_account=args.agent_service_account,
        agent_image_pull_policy=args.agent_image_pull_policy,
        agent_cpu=args.agent_cpu,
        agent_memory=args.agent_memory,
        agent_spool_host_path=args.agent_spool_host_path,
        agent_tolerations=None if tolerations is None else tuple(tolerations),
        agent_priority_class=args.agent_priority_class or "",
        agent_security_context=security,
        agent_shard_nodes=args.agent_shard_nodes,
        reconcile_interval_s=args.reconcile_interval,
        drain_s=args.drain,
        gpu_idle_window_s=args.gpu_idle_window,
        ingest_writers=args.ingest_writers,
        namespaces=tuple(args.namespace),
        allow_cross_namespace=args.allow_cross_namespace,
        agent_seccomp=args.agent_seccomp,
        # Agents meet the injected tracers in the webhook's folder, only when it is served.
        agent_gpu_socket_host_path=args.webhook_socket_host_path if args.webhook_tls_cert else "",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.database_url:
        print(
            "kubeprof operator: error: --database-url is required (or set KUBEPROF_DATABASE_URL)",
            file=sys.stderr,
        )
        return 2
    try:
        config = build_config(args)
        limits = ingest_flags.limits(args)
    except ValueError as exc:
        print(f"kubeprof operator: error: {exc}", file=sys.stderr)
        return 2
    if args.ui_access not in ("port-forward", "any", "off"):  # from KUBEPROF_UI_ACCESS
        print(
            f"kubeprof operator: error: --ui-access {args.ui_access!r}: expected "
            "port-forward, any or off",
            file=sys.stderr,
        )
        return 2

    light_token = ""
    if args.light_token_file:
        try:
            light_token = Path(args.light_token_file).read_text().strip()
        except OSError as exc:
            print(f"kubeprof operator: error: --light-token-file: {exc}", file=sys.stderr)
            return 2
        if not light_token:
            print(
                f"kubeprof operator: error: --light-token-file {args.light_token_file} is "
                "empty: mount the light agents' token Secret there",
                file=sys.stderr,
            )
            return 2

    metrics_token = ""
    if args.metrics_token_file:
        try:
            metrics_token = Path(args.metrics_token_file).read_text().strip()
        except OSError as exc:
            print(f"kubeprof operator: error: --metrics-token-file: {exc}", file=sys.stderr)
            return 2
        if not metrics_token:
            print(
                f"kubeprof operator: error: --metrics-token-file {args.metrics_token_file} "
                "is empty: mount the scrape token Secret there",
                file=sys.stderr,
            )
            return 2

    import kopf

    from kubeprof.operator import handlers, ui_routes
    from kubeprof.operator.db import BatchWriter
    from kubeprof.operator.ingest import IngestApi
    from kubeprof.operator.kube import Kube
    from kubeprof.operator.reconcile import Context
    from kubeprof.operator.registry import Registry
    from kubeprof.storage import Store, StoreError

    try:
        store = Store.open(config.database_url)
    except StoreError as exc:
        print(f"kubeprof operator: error: {exc}", file=sys.stderr)
        return 2
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig  # kopf's login reads it from there
    kube = Kube(args.kubeconfig)
    registry = Registry()

    api = IngestApi(
        registry,
        BatchWriter(store.engine),
        writers=config.ingest_writers,
        limits=limits,
        drain_s=config.drain_s,
        metrics_token=metrics_token,
    )
    ui_routes.mount(api, store.engine, access=args.ui_access)  # read-only web UI, same port
    ctx = Context(kube, store.engine, registry, config)
    if light_token:
        from kubeprof.operator import light_deep

        ctx.light = light_deep.LightAgents(
            light_token, stale_s=args.light_stale, grace_s=args.light_grace
        )
        light_deep.mount(api, ctx.light)  # light agents' heartbeats on the ingest port
    memo = kopf.Memo(ctx=ctx, api=api)
    kopf_registry = kopf.OperatorRegistry()
    handlers.register(kopf_registry, config)
    if args.light_agents:
        from kubeprof.operator import policy_timer

        urls = [u.strip() for u in args.light_agents.split(",") if u.strip()]
        policy_timer.register(kopf_registry, urls, args.policy_interval)
    kopf.configure(verbose=args.verbose)
    escape_logs()  # names in log lines cannot forge lines or drive a terminal
    webhook = _start_webhook(args, config)
    try:
        kopf.run(
            registry=kopf_registry,
            standalone=True,
            memo=memo,
            clusterwide=not config.namespaces,
            namespaces=config.namespaces,
        )
    finally:
        if webhook is not None:
            webhook.stop()
        api.pool.shutdown(wait=False)
        store.close()
    return 0


def _start_webhook(args: argparse.Namespace, config: OperatorConfig) -> Any:
    """The tracer-injection webhook's TLS server when a cert is given, else None."""
    if not args.webhook_tls_cert:
        return None
    from kubeprof.operator.webhook import InjectConfig, WebhookServer

    host, _, port = args.webhook_listen.rpartition(":")
    if not port.isdigit() or not args.webhook_tls_key:
        raise SystemExit(
            "kubeprof operator: error: the webhook wants --webhook-listen "
            "HOST:PORT and both --webhook-tls-cert and --webhook-tls-key"
        )
    cfg = InjectConfig(
        image=config.agent_image,
        image_pull_policy=config.agent_image_pull_policy,
        socket_host_path=args.webhook_socket_host_path,
    )
    return WebhookServer(
        cfg, host or "0.0.0.0", int(port), args.webhook_tls_cert, args.webhook_tls_key
    ).start()
