"""The web UI mounted on the operator's aiohttp server: GET pages and API, nothing else."""

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kubeprof.operator.ui_routes import add_routes
from kubeprof.storage import Store
from kubeprof.ui.routes import Routes
from tests.unit.ui.conftest import ui_store  # noqa: F401 - the shared store fixture


def test_operator_serves_the_ui_read_only(ui_store):  # noqa: F811
    store = Store.open(ui_store)
    pool = ThreadPoolExecutor(1)
    app = web.Application()

    async def ingest_stub(_request: web.Request) -> web.Response:
        return web.json_response({"message": "ingest"})

    app.router.add_post("/v1/sessions/{namespace}/{name}/batches", ingest_stub)
    add_routes(app, Routes(store.engine), pool)

    async def go():
        async with TestClient(TestServer(app)) as client:
            r = await client.get("/api/v1/sessions")
            names = {s["name"] for s in json.loads(await r.text())["sessions"]}
            page = await client.get("/sessions/team-a/train?view=cpu&pod=train-0")
            js = await client.get("/static/flamegraph.js")
            root = await client.get("/", allow_redirects=False)
            post = await client.post("/api/v1/sessions")
            ingest = await client.post("/v1/sessions/ns/a/batches")
            return (
                r.status,
                names,
                page.status,
                page.headers.get("Content-Security-Policy"),
                js.status,
                root.status,
                root.headers.get("Location"),
                post.status,
                ingest.status,
            )

    try:
        (status, names, page, csp, js, root, loc, post, ingest) = asyncio.run(go())
    finally:
        pool.shutdown()
        store.close()
    assert status == 200 and {"pageable", "train"} <= names
    assert page == 200 and csp and "default-src 'self'" in csp
    assert js == 200
    assert (root, loc) == (302, "/sessions")
    assert post == 405  # the UI never writes
    assert ingest == 200  # the ingest routes keep theirs


def test_by_default_only_port_forwarded_connections_read_the_ui():
    from kubeprof.operator.ui_routes import allowed

    # kubectl port-forward connects from the pod's own loopback; other pods do not.
    assert allowed("127.0.0.1", "port-forward") and allowed("::1", "port-forward")
    assert not allowed("10.244.1.7", "port-forward")
    assert not allowed(None, "port-forward") and not allowed("/run/x.sock", "port-forward")
    assert allowed("10.244.1.7", "any")  # behind the user's authenticating Ingress
    assert not allowed("127.0.0.1", "off")


def test_a_bad_ui_access_setting_is_named(monkeypatch, capsys):
    from kubeprof.operator.main import main

    monkeypatch.setenv("KUBEPROF_UI_ACCESS", "public")
    assert main(["--database-url", "sqlite://"]) == 2
    assert "--ui-access 'public': expected port-forward, any or off" in capsys.readouterr().err
