"""The web UI on the operator's HTTP server: read-only GET routes next to the ingest API.

The pages and the JSON API are `kubeprof.ui.routes` (what `kubeprof ui` serves locally);
this module only mounts them on aiohttp and runs their database reads off the event loop.
They need no token, because they only read, and they show nothing secret: session tokens
live in Kubernetes Secrets, never in the database.

Who may read them is `--ui-access`. The ingest port is reachable from every pod (agents
push to it), but profiles are not for every pod: by default (``port-forward``) the UI
answers only connections from the pod's own loopback, which is where `kubectl
port-forward` traffic arrives, so reading it takes the RBAC right to port-forward to the
operator. (A pod on the host network, or a mesh sidecar that forwards inbound traffic
from loopback, makes every client look local: there use ``off`` or a NetworkPolicy.)
``any`` is for an Ingress with the cluster's authentication in front; ``off`` serves no UI.
"""

from __future__ import annotations

import asyncio
import ipaddress
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web
from sqlalchemy.engine import Engine

from kubeprof.operator.config import DEFAULT_UI_ACCESS, UI_ACCESS
from kubeprof.operator.ingest import IngestApi
from kubeprof.ui.routes import HEADERS, Routes

PATHS = ("/api/v1/{tail:.*}", "/sessions", "/sessions/{tail:.*}", "/diff", "/static/{tail:.*}")


def allowed(remote: str | None, access: str) -> bool:
    """May a connection from `remote` (the socket peer, never a forwarded header) read?"""
    if access == "any":
        return True
    if access != "port-forward" or not remote:
        return False
    try:
        return ipaddress.ip_address(remote).is_loopback
    except ValueError:  # a unix socket path or the like: not a port-forward
        return False


def add_routes(
    app: web.Application,
    routes: Routes,
    pool: ThreadPoolExecutor,
    *,
    access: str = DEFAULT_UI_ACCESS,
) -> None:
    """Register the UI's GET routes on `app` (after the ingest routes, which keep theirs)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        if not allowed(request.remote, access):
            return web.json_response(
                {
                    "message": "the kubeprof UI answers port-forwarded connections only: "
                    "kubectl -n NAMESPACE port-forward svc/SERVICE 8080; "
                    "to serve it through an Ingress with your cluster's "
                    "authentication, run the operator with --ui-access any"
                },
                status=403,
                headers=HEADERS,
            )
        loop = asyncio.get_running_loop()
        resp = await loop.run_in_executor(
            pool, routes.handle, "GET", request.path, dict(request.query)
        )
        return web.Response(
            status=resp.status,
            body=resp.body,
            headers={**resp.headers, "Content-Type": resp.content_type},
        )

    async def root(request: web.Request) -> web.StreamResponse:
        if not allowed(request.remote, access):
            return await handle(request)
        raise web.HTTPFound("/sessions")

    app.router.add_get("/", root)
    for path in PATHS:
        app.router.add_get(path, handle)


def mount(
    server: IngestApi, engine: Engine, *, access: str = DEFAULT_UI_ACCESS, threads: int = 2
) -> None:
    """Make `server.app()` build its application with the UI routes added (the ingest
    module stays unaware of the UI; one port serves both). ``access="off"``: nothing."""
    if access not in UI_ACCESS:
        raise ValueError(f"--ui-access {access!r}: expected one of {', '.join(UI_ACCESS)}")
    if access == "off":
        return
    build = server.app
    routes = Routes(engine)
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ui")

    def app() -> web.Application:
        application = build()
        add_routes(application, routes, pool, access=access)
        return application

    server.app = app  # type: ignore[method-assign]
