"""The ingest API agents push to, plus /metrics and /healthz (aiohttp, in kopf's loop).

  POST /v1/sessions/{namespace}/{name}/batches   gzip JSON batch -> stored once
  GET  /v1/sessions/{namespace}/{name}/targets?node=N   target pods on N, phase, end time

Agents authenticate with the session's bearer token (the Secret the operator created for
that session and mounted into its agent pods): a token of another session is refused with
403, so an agent can write only to its own session. Answers tell agents what to do:
2xx stored (or already stored), 503 retry later (database down, session not loaded yet),
400 bad body, 401/403 credentials, 404/410 no such session / no longer accepting.
Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web
from sqlalchemy.exc import SQLAlchemyError

from kubeprof.operator import metrics
from kubeprof.operator.db import BatchWriter
from kubeprof.operator.registry import Registry, SessionEntry
from kubeprof.protocol import codec, routes
from kubeprof.protocol.phases import ACCEPTS_DATA, Phase

log = logging.getLogger("kubeprof.operator.ingest")

# (namespace, name) -> does the ProfilingSession exist? Used when the registry has no entry.
ExistsFn = Callable[[str, str], Awaitable[bool]]


def _json(status: int, message: str = "", **extra: object) -> web.Response:
    return web.json_response({"message": message, **extra}, status=status)


class IngestApi:
    """Request handlers bound to the registry and a batch writer."""

    def __init__(self, registry: Registry, writer: BatchWriter, exists: ExistsFn,
                 *, writers: int = 2, max_body_bytes: int = 64 << 20) -> None:
        self.registry, self.writer, self.exists = registry, writer, exists
        self.pool = ThreadPoolExecutor(max_workers=writers, thread_name_prefix="ingest")
        self.max_body_bytes = max_body_bytes

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body_bytes)
        app.router.add_post(routes.BATCHES_ROUTE, self.post_batch)
        app.router.add_get(routes.TARGETS_ROUTE, self.get_targets)
        app.router.add_get(routes.METRICS, self.get_metrics)
        app.router.add_get(routes.HEALTHZ, self.get_healthz)
        return app

    async def _authorize(self, request: web.Request) -> SessionEntry | web.Response:
        ns, name = request.match_info["namespace"], request.match_info["name"]
        entry = self.registry.get(ns, name)
        if entry is None:
            if await self.exists(ns, name):
                metrics.INGEST_REJECTIONS.labels(reason="not_loaded").inc()
                return _json(503, "session not loaded yet (operator starting); retry")
            metrics.INGEST_REJECTIONS.labels(reason="unknown_session").inc()
            return _json(404, f"no ProfilingSession {ns}/{name}")
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            metrics.INGEST_REJECTIONS.labels(reason="no_token").inc()
            return _json(401, "missing bearer token")
        given = auth.removeprefix("Bearer ").strip().encode()
        if not hmac.compare_digest(given, entry.token.encode()):
            metrics.INGEST_REJECTIONS.labels(reason="forbidden").inc()
            log.warning("refused a request for %s/%s: token does not match the session "
                        "(from %s)", ns, name, request.remote)
            return _json(403, f"token is not valid for session {ns}/{name}")
        return entry

    async def post_batch(self, request: web.Request) -> web.Response:
        entry = await self._authorize(request)
        if isinstance(entry, web.Response):
            return entry
        if entry.closed or entry.phase not in ACCEPTS_DATA:
            metrics.INGEST_REJECTIONS.labels(reason="session_over").inc()
            return _json(410, f"session is {entry.phase.value}; no more data accepted",
                         phase=entry.phase.value)
        try:
            body = await request.read()
        except web.HTTPException:
            raise
        except Exception as exc:  # noqa: BLE001 - aiohttp's gzip errors: a client problem
            metrics.INGEST_REJECTIONS.labels(reason="bad_body").inc()
            return _json(400, f"unreadable body: {exc}")
        # aiohttp may already have undone Content-Encoding: gzip; look at the magic bytes.
        gz = body[:2] == b"\x1f\x8b"
        loop = asyncio.get_running_loop()
        try:
            batch_id, node, batch = await loop.run_in_executor(
                None, lambda: codec.decode(body, gzipped=gz))
        except codec.CodecError as exc:
            metrics.INGEST_REJECTIONS.labels(reason="bad_body").inc()
            return _json(400, str(exc))
        entry.inflight += 1
        metrics.INGEST_PENDING.inc()
        try:
            stored = await loop.run_in_executor(
                self.pool, self.writer.store, entry.db_id, batch_id, node, batch)
        except SQLAlchemyError as exc:
            metrics.INGEST_REJECTIONS.labels(reason="database").inc()
            log.warning("database write failed for %s/%s batch %s: %s: %s", entry.namespace,
                        entry.name, batch_id, type(exc).__name__,
                        str(getattr(exc, "orig", exc)).splitlines()[0][:200])
            return _json(503, "database unavailable; retry later")
        finally:
            entry.inflight -= 1
            metrics.INGEST_PENDING.dec()
        metrics.INGEST_BATCHES.labels(result="duplicate" if stored.duplicate else "stored").inc()
        if not stored.duplicate:
            metrics.INGEST_ROWS.inc(stored.rows)
        return _json(200, "duplicate" if stored.duplicate else "stored", rows=stored.rows,
                     duplicate=stored.duplicate, phase=entry.phase.value)

    async def get_targets(self, request: web.Request) -> web.Response:
        entry = await self._authorize(request)
        if isinstance(entry, web.Response):
            return entry
        node = request.query.get("node", "")
        pods = [{"uid": t.uid, "name": t.name, "namespace": t.namespace}
                for t in entry.targets_on(node)]
        # A closed session drains like Aggregating even before reconcile writes the phase.
        phase = Phase.AGGREGATING if entry.closed and entry.phase in ACCEPTS_DATA else \
            entry.phase
        return _json(200, "", phase=phase.value, endTime=entry.end_time, pods=pods)

    async def get_metrics(self, _request: web.Request) -> web.Response:
        metrics.set_phases(self.registry.phases())
        return web.Response(body=metrics.render(),
                            headers={"Content-Type": "text/plain; version=0.0.4"})

    async def get_healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")


async def serve(api: IngestApi, host: str, port: int) -> web.AppRunner:
    """Start listening; the caller keeps the runner and calls cleanup() at shutdown."""
    runner = web.AppRunner(api.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("ingest API and /metrics listening on %s:%d", host, port)
    return runner
