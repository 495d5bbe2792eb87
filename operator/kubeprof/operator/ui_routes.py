"""The web UI on the operator's HTTP server: read-only GET routes next to the ingest API.

The pages and the JSON API are `kubeprof.ui.routes` (what `kubeprof ui` serves locally);
this module only mounts them on aiohttp and runs their database reads off the event loop.
They need no token, because they only read, and they show nothing secret: session tokens
live in Kubernetes Secrets, never in the database. Reach them with `kubectl port-forward`
(README, "Web UI"); put an Ingress with your cluster's authentication in front to share.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web
from sqlalchemy.engine import Engine

from kubeprof.operator.ingest import IngestApi
from kubeprof.ui.routes import Routes

PATHS = ("/api/v1/{tail:.*}", "/sessions", "/sessions/{tail:.*}", "/diff", "/static/{tail:.*}")


def add_routes(app: web.Application, routes: Routes, pool: ThreadPoolExecutor) -> None:
    """Register the UI's GET routes on `app` (after the ingest routes, which keep theirs)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        resp = await loop.run_in_executor(
            pool, routes.handle, "GET", request.path, dict(request.query)
        )
        return web.Response(
            status=resp.status,
            body=resp.body,
            headers={**resp.headers, "Content-Type": resp.content_type},
        )

    async def root(_request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/sessions")

    app.router.add_get("/", root)
    for path in PATHS:
        app.router.add_get(path, handle)


def mount(server: IngestApi, engine: Engine, *, threads: int = 2) -> None:
    """Make `server.app()` build its application with the UI routes added (the ingest
    module stays unaware of the UI; one port serves both)."""
    build = server.app
    routes = Routes(engine)
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ui")

    def app() -> web.Application:
        application = build()
        add_routes(application, routes, pool)
        return application

    server.app = app  # type: ignore[method-assign]
