"""Off-CPU waits in a cluster session: an agent's batch through the operator's real ingest
HTTP API into a real PostgreSQL (COPY), read back as the report and the UI read it."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from kubeprof.model import Batch, CpuSample, Frame, FrameKind, OffCpuSample, ProcessInfo
from kubeprof.operator.targets import Target
from kubeprof.protocol import codec
from kubeprof.storage import Store, offcpu
from kubeprof.storage import queries as q
from tests.e2e import ingest_server

pytestmark = pytest.mark.e2e

NS, NAME, TOKEN = "offcpu", "serve", "tok-offcpu"
POD, NODE = "0b6f2d3c-2222-4a4a-9c9c-000000000027", "node-a"
WAIT = (
    Frame("handle", FrameKind.PYTHON, "/app/serve.py", 40),
    Frame("recv", FrameKind.NATIVE, "/lib/libc.so.6"),
)
WORK = (Frame("handle", FrameKind.PYTHON, "/app/serve.py", 44),)


@pytest.fixture(scope="module")
def store(postgres_dsn) -> Iterator[Store]:
    s = Store.open(postgres_dsn.url)
    yield s
    s.close()


def _post(url: str, body: bytes) -> int:
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        conn.request(
            "POST",
            f"/v1/sessions/{NS}/{NAME}/batches",
            body=body,
            headers={
                "Authorization": f"Bearer {TOKEN}",
                "Content-Type": "application/json",
                "Content-Encoding": "gzip",
            },
        )
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def test_waits_are_stored_once_and_read_back(store):
    srv = ingest_server.start(store.engine)
    try:
        entry = srv.add_session(store.engine, NS, NAME, TOKEN, [Target(POD, "serve", NS, NODE)])
        waits = tuple(
            OffCpuSample(
                10**9 + i * 10**8,
                100,
                101,
                "worker",
                75_000_000,
                75_000_000,
                "recvfrom",
                "bpf-sched",
                WAIT,
            )
            for i in range(8)
        )
        waits += (
            OffCpuSample(
                2 * 10**9, 100, 102, "idle", 3 * 10**9, 3 * 10**9, "futex", "bpf-sched", ()
            ),
        )
        batch = Batch(
            samples=tuple(CpuSample(10**9 + i, 100, 101, "worker", 0, WORK) for i in range(25)),
            processes=(ProcessInfo(100, 1, "python", "python serve.py", "c" * 64, POD),),
            offcpu_samples=waits,
            counters={"offcpu_short": 40},
        )
        body = codec.encode(batch, batch_id="agent-a-1", node=NODE)
        assert _post(srv.url, body) in (200, 201, 202)
        assert _post(srv.url, body) in (200, 201, 202)  # a retry: stored once
    finally:
        srv.stop()
    with store.engine.connect() as conn:
        info = q.find_session(conn, f"{NS}/{NAME}")
        back = offcpu.offcpu_samples(conn, entry.db_id)
        profile = q.load_profile(conn, info)
    assert back == sorted(waits, key=lambda w: w.ts_ns)
    by_tid = {}
    for ws in profile.offcpu:
        by_tid[ws.tid] = by_tid.get(ws.tid, 0) + ws.value_ns
    assert by_tid == {101: 8 * 75_000_000, 102: 3 * 10**9}  # the thread that only waited too
    assert profile.meta["counter.offcpu_short"] == "40"
