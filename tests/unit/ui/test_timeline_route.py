"""The web UI's timeline download on a real SQLite store: the same Perfetto trace the CLI
writes, gzip'd, named for the session, and refused above the size the UI builds."""

from __future__ import annotations

import gzip
import json
import threading
import urllib.request

import jsonschema
import pytest

from kubeprof.reporting import timeline_command
from kubeprof.storage import Store
from kubeprof.ui.routes import Routes
from kubeprof.ui.server import make_server
from tests.unit.report.trace_schema import SCHEMA

PATH = "/api/v1/sessions/{}/timeline"


@pytest.fixture
def routes(ui_store: str):
    store = Store.open(ui_store)
    yield Routes(store.engine)
    store.close()


def test_timeline_is_the_clis_trace_gzipd_as_a_file_to_save(routes, ui_store, tmp_path):
    resp = routes.handle("GET", PATH.format("local/pageable"), {})
    assert resp.status == 200
    assert resp.content_type == "application/gzip"
    assert "Content-Encoding" not in resp.headers  # the file itself, .json.gz
    assert resp.headers["Content-Disposition"] == (
        'attachment; filename="local_pageable.trace.json.gz"'
    )
    assert "default-src 'self'" in resp.headers["Content-Security-Policy"]
    trace = json.loads(gzip.decompress(resp.body))
    jsonschema.validate(trace, SCHEMA)
    kinds = {e.get("cat") for e in trace["traceEvents"]}
    assert {"phase", "kernel", "memcpy", "memset", "launch", "sync", "cpu"} <= kinds, kinds
    out = tmp_path / "cli.trace.json"
    assert timeline_command(ui_store, "pageable", str(out)) == 0
    assert trace == json.loads(out.read_text())  # one code path: the CLI's trace exactly


def test_a_cluster_session_downloads_as_namespace_name(routes):
    resp = routes.handle("GET", PATH.format("team-a/train"), {})
    assert resp.status == 200
    assert resp.headers["Content-Disposition"] == (
        'attachment; filename="team-a_train.trace.json.gz"'
    )
    trace = json.loads(gzip.decompress(resp.body))
    jsonschema.validate(trace, SCHEMA)
    assert sum(e["ph"] == "B" for e in trace["traceEvents"]) >= 2  # both pods' threads


@pytest.mark.parametrize(
    ("ref", "cli"),
    [
        ("team-a/train", "kubeprof report team-a/train -f perfetto"),
        ("local/pageable", "kubeprof report pageable -f perfetto"),
    ],
)
def test_a_session_too_large_is_refused_with_the_cli_command(ui_store, ref, cli):
    store = Store.open(ui_store)
    try:
        resp = Routes(store.engine, timeline_limit=20).handle("GET", PATH.format(ref), {})
    finally:
        store.close()
    assert resp.status == 413 and resp.content_type == "application/json"
    message = json.loads(resp.body)["message"]
    assert cli in message and "more than the 20" in message, message


def test_an_unknown_session_has_no_timeline(routes):
    resp = routes.handle("GET", PATH.format("local/nope"), {})
    assert resp.status == 404 and b"no session local/nope" in resp.body


def test_kubeprof_ui_serves_the_timeline_over_http(ui_store):
    store = Store.open(ui_store)
    server = make_server(Routes(store.engine), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}" + PATH.format("team-a/train")
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            assert r.headers["Content-Type"] == "application/gzip"
            assert r.headers.get("Content-Encoding") is None
            assert "team-a_train.trace.json.gz" in r.headers["Content-Disposition"]
            assert "traceEvents" in json.loads(gzip.decompress(r.read()))
    finally:
        server.shutdown()
        server.server_close()
        store.close()


def test_the_operator_serves_the_same_file(ui_store):
    """The operator mounts these routes on aiohttp: the download arrives intact there too
    (no Content-Encoding added, the file name kept)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from kubeprof.operator.ui_routes import add_routes

    store = Store.open(ui_store)
    pool = ThreadPoolExecutor(1)
    app = web.Application()
    add_routes(app, Routes(store.engine), pool)

    async def go() -> tuple[int, dict[str, str], bytes]:
        async with TestClient(TestServer(app)) as client:
            r = await client.get(PATH.format("team-a/train"), auto_decompress=False)
            return r.status, dict(r.headers), await r.read()

    try:
        status, headers, body = asyncio.run(go())
    finally:
        pool.shutdown()
        store.close()
    assert status == 200 and headers["Content-Type"] == "application/gzip"
    assert "Content-Encoding" not in headers
    assert 'filename="team-a_train.trace.json.gz"' in headers["Content-Disposition"]
    jsonschema.validate(json.loads(gzip.decompress(body)), SCHEMA)
