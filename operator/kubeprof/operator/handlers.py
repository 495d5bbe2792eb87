"""kopf handler registrations, and nothing else: each handler calls one plain function.

The reconcile timer runs for every ProfilingSession, including right after an operator
(re)start, which is what makes the operator restart-safe: the timer's first pass rebuilds
the in-memory registry from the CR, its Secret and the database.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf
from sqlalchemy.exc import SQLAlchemyError

from kubeprof.operator import db, ingest, metrics, reconcile
from kubeprof.operator.config import GROUP, PLURAL, VERSION, OperatorConfig
from kubeprof.operator.kube import KubeError
from kubeprof.safe_text import escape_tree


def status_changes(old: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    """The `.status` keys to patch: those that changed, with every string in them escaped
    (function and pod names are data, never terminal control: `kubeprof.safe_text`)."""
    out = {}
    for key, value in status.items():
        value = escape_tree(value)
        if old.get(key) != value:
            out[key] = value
    return out


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    """Register the operator's handlers on `registry` with intervals from `config`."""

    @kopf.on.login(registry=registry)
    def handle_login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # A private registry lacks kopf's default login handlers: in-cluster first.
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=registry)
    async def handle_startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        settings.persistence.finalizer = "kubeprof.dev/finalizer"
        settings.posting.level = logging.WARNING  # only problems become k8s Events
        settings.watching.server_timeout = 60
        memo.runner = await ingest.serve(memo.api, config.listen_host, config.listen_port)

    @kopf.on.cleanup(registry=registry)
    async def handle_cleanup(memo: kopf.Memo, **_: Any) -> None:
        runner = getattr(memo, "runner", None)
        if runner is not None:
            await runner.cleanup()

    @kopf.timer(
        GROUP,
        VERSION,
        PLURAL,
        registry=registry,
        id="reconcile",
        interval=config.reconcile_interval_s,
        initial_delay=0.0,
    )
    def handle_reconcile_session(
        body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, logger: kopf.Logger, **_: Any
    ) -> None:
        try:
            status = reconcile.reconcile(memo.ctx, body)
        except SQLAlchemyError as exc:
            metrics.RECONCILE_ERRORS.labels(stage="database").inc()
            first = str(getattr(exc, "orig", exc)).splitlines()[0][:200]
            raise kopf.TemporaryError(
                f"database unavailable: {type(exc).__name__}: {first}",
                delay=config.reconcile_interval_s,
            ) from exc
        except (KubeError, OSError) as exc:
            metrics.RECONCILE_ERRORS.labels(stage="kubernetes").inc()
            raise kopf.TemporaryError(
                f"API call failed: {exc}", delay=config.reconcile_interval_s
            ) from exc
        except Exception:
            metrics.RECONCILE_ERRORS.labels(stage="other").inc()
            raise
        entry = memo.ctx.writer_registry.get(
            body["metadata"]["namespace"], body["metadata"]["name"]
        )
        if entry is not None and entry.uid == body["metadata"]["uid"]:
            quota = memo.api.usage.quota(entry)  # used and limit: records, frames, stacks
            if quota is not None:
                status["quota"] = quota
        old = body.get("status") or {}
        if old.get("phase") != status.get("phase"):
            logger.info(
                "phase %s -> %s (%s)",
                old.get("phase") or "-",
                status["phase"],
                status.get("reason", ""),
            )
        for key, value in status_changes(old, status).items():
            patch.status[key] = value

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry, optional=True)
    def handle_delete_session(
        name: str, namespace: str | None, uid: str | None, memo: kopf.Memo, **_: Any
    ) -> None:
        if namespace is None:  # ProfilingSession is namespaced; kopf types allow None
            return
        entry = memo.ctx.writer_registry.get(namespace, name)
        if entry is not None and entry.uid == uid:
            entry.closed = True  # no batch is stored for it any more
            memo.api.usage.forget(entry)
        memo.ctx.writer_registry.remove(namespace, name)
        metrics.forget_session(namespace, name)
        if uid:  # not "running" for ever in the database
            try:
                db.mark_deleted(memo.ctx.engine, namespace, name, uid)
            except SQLAlchemyError as exc:
                raise kopf.TemporaryError(
                    f"database unavailable: {type(exc).__name__}", delay=config.reconcile_interval_s
                ) from exc
