"""The ingest API over HTTP (aiohttp test server) with an SQLite store: auth, idempotency."""

import asyncio
from datetime import UTC, datetime

import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from kubeprof.agent.cluster.client import IngestClient, Outcome
from kubeprof.model import Batch, CpuSample, Frame, FrameKind, ProcessInfo
from kubeprof.operator import metrics as metrics_mod
from kubeprof.operator.db import BatchWriter, ensure_session
from kubeprof.operator.ingest import SERVER_OPTIONS, IngestApi
from kubeprof.operator.phases import Phase
from kubeprof.operator.registry import Registry, SessionEntry
from kubeprof.operator.targets import Target
from kubeprof.protocol import routes
from kubeprof.protocol.codec import encode
from kubeprof.storage import Store
from kubeprof.storage.models import IngestedBatchRow, SampleRow

STACK = (Frame("main", FrameKind.PYTHON, "t.py", 1),)
BATCH = Batch(
    samples=tuple(CpuSample(i, 5, 5, "py", 0, STACK) for i in range(10)),
    processes=(ProcessInfo(5, 1, "py", "py", "c1", "uid-p"),),
)


@pytest.fixture
def setup(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path}/k.db")
    reg = Registry()
    for name, token in (("a", "tok-a"), ("b", "tok-b")):
        sid = ensure_session(
            store.engine,
            "ns",
            name,
            f"uid-{name}-000",
            hz=99,
            started_at=datetime.now(UTC),
            meta={},
        )
        reg.put(
            SessionEntry(
                "ns",
                name,
                f"uid-{name}-000",
                sid,
                token,
                Phase.RUNNING,
                42.0,
                [Target("uid-p", "pod", "ns", "n1")],
            )
        )

    yield store, reg, BatchWriter(store.engine), None
    store.close()


def _run(setup, fn, **kw):
    store, reg, writer, _ = setup
    api = IngestApi(reg, writer, writers=1, **{"startup_grace_s": 0, **kw})

    async def go():
        async with TestClient(TestServer(api.app(), **SERVER_OPTIONS)) as client:
            return await fn(client, store, reg, writer)

    try:
        return asyncio.run(go())
    finally:
        api.pool.shutdown()


def _post(client, name, token, body, batch_id="n1-1"):
    return client.post(
        f"/v1/sessions/ns/{name}/batches",
        data=body,
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Encoding": "gzip",
            "X-Kubeprof-Batch-Id": batch_id,
        },
    )


def _count(store, table, col):
    with store.engine.connect() as c:
        return c.scalar(select(func.count()).select_from(table).where(col.isnot(None)))


def test_batch_stored_once_even_when_retried(setup):
    body = encode(BATCH, batch_id="n1-1", node="n1")

    async def fn(client, store, reg, writer):
        r1 = await _post(client, "a", "tok-a", body)
        r2 = await _post(client, "a", "tok-a", body)
        return r1.status, await r1.json(), r2.status, await r2.json()

    s1, j1, s2, j2 = _run(setup, fn)
    assert (s1, s2) == (200, 200)
    assert (j1["duplicate"], j2["duplicate"]) == (False, True) and j1["rows"] == 11
    store = setup[0]
    assert _count(store, SampleRow, SampleRow.id) == 10
    assert _count(store, IngestedBatchRow, IngestedBatchRow.batch_id) == 1


def test_credentials(setup):
    body = encode(BATCH, batch_id="x", node="n1")

    async def fn(client, *_):
        other = await _post(client, "b", "tok-a", body)  # a's token on b's session
        none = await client.post("/v1/sessions/ns/b/batches", data=body)
        unknown = await _post(client, "zzz", "tok-a", body)
        targets = await client.get(
            "/v1/sessions/ns/b/targets?node=n1", headers={"Authorization": "Bearer tok-a"}
        )
        return (
            other.status,
            none.status,
            unknown.status,
            targets.status,
            await other.json()
            == {**await unknown.json(), "message": (await other.json())["message"]},
        )

    # An unknown session answers exactly like a wrong token (no API lookup, no oracle).
    assert _run(setup, fn) == (403, 401, 403, 403, True)


def test_unloaded_sessions_wait_while_the_operator_starts(setup):
    async def fn(client, *_):
        return (await _post(client, "zzz", "whatever", b"{}")).status

    assert _run(setup, fn, startup_grace_s=60) == 503


def test_targets_and_closed_session(setup):
    async def fn(client, store, reg, writer):
        hdr = {"Authorization": "Bearer tok-a"}
        t = await (await client.get("/v1/sessions/ns/a/targets?node=n1", headers=hdr)).json()
        t2 = await (await client.get("/v1/sessions/ns/a/targets?node=n9", headers=hdr)).json()
        reg.get("ns", "a").close(timeout_s=0)
        late = await _post(client, "a", "tok-a", encode(BATCH, batch_id="late", node="n1"))
        bad = await client.post(
            "/v1/sessions/ns/b/batches",
            data=b"\x1f\x8bgarbage",
            headers={"Authorization": "Bearer tok-b"},
        )
        metrics = await (await client.get("/metrics")).text()
        return t, t2, late.status, bad.status, metrics

    def bad_bodies() -> float:  # the registry is process-wide: other tests count too
        value = metrics_mod.REGISTRY.get_sample_value(
            "kubeprof_ingest_rejections_total", {"reason": "bad_body"}
        )
        return value or 0.0

    before = bad_bodies()
    t, t2, late, bad, metrics = _run(setup, fn)
    assert t["pods"] == [{"uid": "uid-p", "name": "pod", "namespace": "ns"}]
    assert t["endTime"] == 42.0 and t["phase"] == "Running" and t2["pods"] == []
    assert (late, bad) == (409, 400)
    assert 'kubeprof_ingest_rejections_total{reason="bad_body"}' in metrics
    assert bad_bodies() - before == 1
    assert 'kubeprof_sessions{phase="Running"} 2.0' in metrics


def test_database_down_answers_503_and_nothing_half_written(setup, monkeypatch):
    body = encode(BATCH, batch_id="n1-9", node="n1")
    store, _reg, _writer, _ = setup
    import kubeprof.operator.db as dbmod

    def boom(*_a, **_k):
        raise OperationalError("COPY", {}, Exception("server closed the connection"))

    monkeypatch.setattr(dbmod, "write_batch", boom)

    async def fn(client, *_):
        return (await _post(client, "a", "tok-a", body)).status

    assert _run(setup, fn) == 503
    assert _count(store, IngestedBatchRow, IngestedBatchRow.batch_id) == 0  # rolled back
    monkeypatch.undo()

    async def again(client, *_):
        return (await _post(client, "a", "tok-a", body)).status

    assert _run(setup, again) == 200
    assert _count(store, SampleRow, SampleRow.id) == 10


def test_agent_client_reaches_every_route(setup):
    """The agent's IngestClient and the API's router take their paths from one module."""

    async def fn(client, store, reg, writer):
        base = str(client.make_url("/")).rstrip("/")
        agent = IngestClient(base, "ns", "a", "tok-a", timeout_s=10)
        loop = asyncio.get_running_loop()
        posted = await loop.run_in_executor(
            None, lambda: agent.post_batch(encode(BATCH, batch_id="n1-r", node="n1"), "n1-r")
        )
        targets = await loop.run_in_executor(None, agent.targets, "n1")
        health = await (await client.get(routes.HEALTHZ)).text()
        return posted, targets, health

    posted, targets, health = _run(setup, fn)
    assert (posted.outcome, posted.status, posted.data["rows"]) == (Outcome.STORED, 200, 11)
    assert targets.status == 200 and [p["uid"] for p in targets.data["pods"]] == ["uid-p"]
    assert health == "ok"
