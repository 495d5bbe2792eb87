"""Leftovers and trust on the operator side (issue 32, item 6): a deleted session is marked
so in the database, deeply nested JSON is refused without a traceback, and unexpected
errors log one traceback per interval, not one per request."""

import asyncio
import logging
from datetime import UTC, datetime

from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import select

from kubeprof.model import Batch, CpuSample
from kubeprof.operator import db
from kubeprof.operator.db import BatchWriter, ensure_session
from kubeprof.operator.ingest import SERVER_OPTIONS, IngestApi
from kubeprof.operator.phases import Phase
from kubeprof.operator.registry import Registry, SessionEntry
from kubeprof.operator.targets import Target
from kubeprof.protocol.codec import encode
from kubeprof.storage import Store
from kubeprof.storage.models import SessionRow


def _status(store: Store, sid: int) -> str:
    with store.engine.connect() as c:
        return str(c.scalar(select(SessionRow.status).where(SessionRow.id == sid)))


def test_a_deleted_running_session_is_marked_deleted_and_an_ended_one_kept(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path}/k.db")
    try:
        now = datetime.now(UTC)
        running = ensure_session(store.engine, "ml", "a", "uid-a", hz=99, started_at=now, meta={})
        done = ensure_session(store.engine, "ml", "b", "uid-b", hz=99, started_at=now, meta={})
        db.finish_session(store.engine, done, "completed")
        assert db.mark_deleted(store.engine, "ml", "a", "uid-a") is True
        assert db.mark_deleted(store.engine, "ml", "b", "uid-b") is False
        assert (_status(store, running), _status(store, done)) == ("deleted", "completed")
    finally:
        store.close()


class BrokenWriter(BatchWriter):
    """A writer with a bug: every store raises something unexpected."""

    def store(self, *_a, **_k):
        raise KeyError("a bug")


def _serve(tmp_path, writer_cls, fn):
    store = Store.open(f"sqlite:///{tmp_path}/k.db")
    reg = Registry()
    sid = ensure_session(
        store.engine, "ns", "s", "uid-s", hz=99, started_at=datetime.now(UTC), meta={}
    )
    reg.put(
        SessionEntry(
            "ns", "s", "uid-s", sid, "tok", Phase.RUNNING, 0.0, [Target("uid-p", "pod", "ns", "n1")]
        )
    )
    api = IngestApi(reg, writer_cls(store.engine), writers=1, startup_grace_s=0)

    async def go():
        async with TestClient(TestServer(api.app(), **SERVER_OPTIONS)) as client:

            async def post(body: bytes) -> int:
                r = await client.post(
                    "/v1/sessions/ns/s/batches", data=body, headers={"Authorization": "Bearer tok"}
                )
                return r.status

            return await fn(post)

    try:
        return asyncio.run(go())
    finally:
        api.pool.shutdown()
        store.close()


def _tracebacks(caplog) -> int:
    return sum(1 for r in caplog.records if r.exc_info and r.name.startswith("kubeprof"))


def test_deeply_nested_json_is_refused_without_a_traceback(tmp_path, caplog):
    deep = b'{"v":1,"batch_id":"x","samples":' + b"[" * 100_000 + b"]" * 100_000 + b"}"

    async def fn(post):
        return [await post(deep) for _ in range(20)]

    with caplog.at_level(logging.WARNING):
        statuses = _serve(tmp_path, BatchWriter, fn)
    assert set(statuses) == {400}
    assert _tracebacks(caplog) == 0


def test_unexpected_errors_log_one_traceback_per_interval(tmp_path, caplog):
    body = encode(Batch(samples=(CpuSample(1, 5, 5, "py", 0, ()),)), batch_id="b", node="n1")

    async def fn(post):
        return [await post(body) for _ in range(20)]

    with caplog.at_level(logging.WARNING):
        statuses = _serve(tmp_path, BrokenWriter, fn)
    assert set(statuses) == {422}
    assert _tracebacks(caplog) == 1


def test_metrics_need_the_scrape_token_when_one_is_set(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path}/k.db")
    apis = {
        "open": IngestApi(Registry(), BatchWriter(store.engine), startup_grace_s=0),
        "token": IngestApi(
            Registry(), BatchWriter(store.engine), startup_grace_s=0, metrics_token="s3cret"
        ),
    }

    async def go(api, headers):
        async with TestClient(TestServer(api.app(), **SERVER_OPTIONS)) as client:
            r = await client.get("/metrics", headers=headers)
            return r.status, await r.text()

    try:
        assert asyncio.run(go(apis["open"], {}))[0] == 200
        assert asyncio.run(go(apis["token"], {}))[0] == 401
        assert asyncio.run(go(apis["token"], {"Authorization": "Bearer wrong"}))[0] == 401
        status, text = asyncio.run(go(apis["token"], {"Authorization": "Bearer s3cret"}))
        assert status == 200 and "kubeprof_ingest_batches_total" in text
    finally:
        for api in apis.values():
            api.pool.shutdown()
        store.close()
