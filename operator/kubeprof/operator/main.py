"""`kubeprof operator`: reconcile ProfilingSessions, serve the ingest API (what the chart runs)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kubeprof.operator import flags
from kubeprof.operator.config import OperatorConfig
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kubeprof operator",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    flags.add(p)
    return p


build_config = flags.config  # the operator's settings from parsed flags


def _read_token(path: str, flag: str, what: str) -> str:
    """The token in `path` ("" when no file is given); ValueError when unreadable or empty."""
    if not path:
        return ""
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise ValueError(f"{flag}: {exc}") from None
    if not token:
        raise ValueError(f"{flag} {path} is empty: mount {what} there")
    return token


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
        light_token = _read_token(
            config.light_token_file, "--light-token-file", "the light agents' token Secret"
        )
        metrics_token = _read_token(
            config.metrics_token_file, "--metrics-token-file", "the scrape token Secret"
        )
    except ValueError as exc:
        print(f"kubeprof operator: error: {exc}", file=sys.stderr)
        return 2

    import kopf

    from kubeprof.operator import handlers, ui_routes
    from kubeprof.operator.db import BatchWriter
    from kubeprof.operator.ingest import IngestApi
    from kubeprof.operator.kube import Kube
    from kubeprof.operator.node_pods import NodePods
    from kubeprof.operator.reconcile import Context
    from kubeprof.operator.registry import Registry
    from kubeprof.storage import Store, StoreError

    try:
        store = Store.open(config.database_url)
    except StoreError as exc:
        print(f"kubeprof operator: error: {exc}", file=sys.stderr)
        return 2
    if config.kubeconfig:
        os.environ["KUBECONFIG"] = config.kubeconfig  # kopf's login reads it from there
    kube = Kube(config.kubeconfig or None)
    registry = Registry()

    writer = BatchWriter(store.engine)
    writer.compactor.adopt()  # what an operator before this one left uncounted
    api = IngestApi(
        registry,
        writer,
        writers=config.ingest_writers,
        limits=config.ingest_limits,
        drain_s=config.drain_s,
        metrics_token=metrics_token,
        reviews=_token_reviews(config, kube),
        node_pods=NodePods(lambda node: kube.node_pods(node, config.namespaces)),
        agent_service_account=config.agent_service_account or "default",
    )
    ui_routes.mount(api, store.engine, access=config.ui_access)  # read-only web UI, same port
    ctx = Context(kube, store.engine, registry, config)
    if light_token or config.light_daemonset:
        from kubeprof.operator import light_deep

        ctx.light = light_deep.LightAgents(
            light_token,
            daemonset=config.light_daemonset,
            service_account=config.light_service_account,
            stale_s=config.light_stale_s,
            grace_s=config.light_grace_s,
        )
        light_deep.mount(api, ctx.light)  # light agents' heartbeats on the ingest port
    memo = kopf.Memo(ctx=ctx, api=api)
    kopf_registry = kopf.OperatorRegistry()
    handlers.register(kopf_registry, config)
    if config.light_agents:
        from kubeprof.operator import policy_timer

        policy_timer.register(kopf_registry, config.light_agents, config.policy_interval_s)
    kopf.configure(verbose=config.verbose)
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


def _token_reviews(config: OperatorConfig, kube: Any) -> Any:
    """TokenReview of agents' ServiceAccount tokens (`--agent-auth serviceaccount`), else
    None: the session token alone."""
    if config.agent_auth != "serviceaccount":
        return None
    from kubeprof.operator.agent_identity import TokenReviews

    return TokenReviews(kube.token_review, kube.get_pod)


def _start_webhook(_flags: argparse.Namespace, config: OperatorConfig) -> Any:
    """The tracer-injection webhook's TLS server when a cert is given, else None (the
    parsed flags are in `config` already)."""
    if not config.webhook_tls_cert:
        return None
    from kubeprof.operator.webhook import InjectConfig, WebhookServer

    host, _, port = config.webhook_listen.rpartition(":")
    if not port.isdigit() or not config.webhook_tls_key:
        raise SystemExit(
            "kubeprof operator: error: the webhook wants --webhook-listen "
            "HOST:PORT and both --webhook-tls-cert and --webhook-tls-key"
        )
    cfg = InjectConfig(
        image=config.agent_image,
        image_pull_policy=config.agent_image_pull_policy,
        socket_host_path=config.webhook_socket_host_path,
    )
    return WebhookServer(
        cfg, host or "0.0.0.0", int(port), config.webhook_tls_cert, config.webhook_tls_key
    ).start()
