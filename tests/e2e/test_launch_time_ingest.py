"""Launch times in a cluster session: an agent's batch of kernels with the time and thread
of each launch, through the operator's real ingest HTTP API into a real PostgreSQL, read back
as reports read them; a previous agent's batch (codec version 1, no launch fields) still
goes in, its kernels without a launch time."""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Iterator

import pytest

from kubeprof.agent.cluster.client import IngestClient
from kubeprof.model import Batch, Frame, FrameKind, GpuActivity
from kubeprof.operator.targets import Target
from kubeprof.protocol import codec
from kubeprof.storage import Store
from kubeprof.storage import queries as q
from tests.e2e import ingest_server

pytestmark = pytest.mark.e2e

NS, NAME, TOKEN = "launch", "train", "tok-launch"
POD, NODE = "0b6f2d3c-3333-4a4a-9c9c-000000000031", "node-a"
STACK = (
    Frame("step", FrameKind.PYTHON, "/app/train.py", 12),
    Frame("cudaLaunchKernel", FrameKind.CUDA_API),
)


@pytest.fixture(scope="module")
def store(postgres_dsn) -> Iterator[Store]:
    s = Store.open(postgres_dsn.url)
    yield s
    s.close()


def _kernels(first_corr: int, launch_ns: int = 0, launch_tid: int = 0) -> tuple[GpuActivity, ...]:
    """20 kernels a ms apart; each launched ``launch_ns`` into its ms when that is not 0."""
    return tuple(
        GpuActivity(
            "kernel",
            "_Z4gemmv",
            10**9 + i * 10**6,
            10**9 + i * 10**6 + 500_000,
            0,
            100,
            first_corr + i,
            7,
            stack=STACK,
            launch_ns=launch_ns + i * 10**6 if launch_ns else 0,
            launch_tid=launch_tid,
        )
        for i in range(20)
    )


def test_launch_times_are_stored_and_an_older_agents_batch_still_goes_in(store):
    new = _kernels(1, launch_ns=10**9 - 40_000, launch_tid=101)
    old = _kernels(1_001)
    doc = codec.to_dict(Batch(gpu_activities=old), batch_id="agent-a-old", node=NODE)
    doc["v"] = 1  # what an agent of the previous release sends: rows without the two fields
    doc["gpu_activities"] = [row[:-2] for row in doc["gpu_activities"]]
    srv = ingest_server.start(store.engine)
    try:
        entry = srv.add_session(store.engine, NS, NAME, TOKEN, [Target(POD, NAME, NS, NODE)])
        client = IngestClient(srv.url, NS, NAME, TOKEN)
        body = codec.encode(Batch(gpu_activities=new), batch_id="agent-a-1", node=NODE)
        for batch_id, gz in (
            ("agent-a-1", body),
            ("agent-a-old", gzip.compress(json.dumps(doc).encode())),
        ):
            ans = client.post_batch(gz, batch_id)
            assert ans.status == 200, (ans.status, ans.detail)
    finally:
        srv.stop()
    with store.engine.connect() as conn:
        back = q.gpu_activities(conn, entry.db_id)
    by_corr = {a.correlation_id: a for a in back}
    assert [by_corr[a.correlation_id] for a in new] == list(new)
    assert all(by_corr[a.correlation_id].launch_ns == 0 for a in old)
    assert [by_corr[a.correlation_id] for a in old] == [
        dataclasses.replace(a, launch_ns=0, launch_tid=0) for a in old
    ]
