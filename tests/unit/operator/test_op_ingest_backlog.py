"""kubeprof_ingest_pending_batches: batches waiting for a database writer (the backlog the
KubeprofIngestFallingBehind alert watches) rise while writers are busy and fall after."""

import asyncio
import threading

from aiohttp.test_utils import TestClient, TestServer

from kubeprof.model import Batch, CpuSample, Frame, FrameKind
from kubeprof.operator.db import Stored
from kubeprof.operator.ingest import IngestApi
from kubeprof.operator.phases import Phase
from kubeprof.operator.registry import Registry, SessionEntry, Target
from kubeprof.protocol.codec import encode

BATCH = Batch(samples=(CpuSample(1, 5, 5, "py", 0, (Frame("f", FrameKind.PYTHON, "t.py", 1),)),))


class SlowWriter:
    """Holds every write until released, like a database that cannot keep up."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def store(self, *_args, **_kw) -> Stored:
        self.release.wait(30)
        return Stored(False, 1)


def _pending(text: str) -> float:
    line = next(x for x in text.splitlines() if x.startswith("kubeprof_ingest_pending_batches "))
    return float(line.split()[1])


def test_pending_batches_gauge_tracks_the_writer_backlog():
    reg = Registry()
    reg.put(
        SessionEntry(
            "ns", "a", "uid-a", 1, "tok", Phase.RUNNING, 42.0, [Target("uid-p", "pod", "ns", "n")]
        )
    )
    writer = SlowWriter()
    api = IngestApi(reg, writer, writers=1, startup_grace_s=0)  # type: ignore[arg-type]

    async def go():
        async with TestClient(TestServer(api.app())) as client:
            before = _pending(await (await client.get("/metrics")).text())
            posts = [
                asyncio.create_task(
                    client.post(
                        "/v1/sessions/ns/a/batches",
                        data=encode(BATCH, batch_id=f"n-{i}", node="n"),
                        headers={"Authorization": "Bearer tok", "Content-Encoding": "gzip"},
                    )
                )
                for i in range(3)
            ]
            during = 0.0
            for _ in range(200):  # until all three wait for or hold a decode+write thread
                during = _pending(await (await client.get("/metrics")).text())
                if during - before >= 3:
                    break
                await asyncio.sleep(0.02)
            writer.release.set()
            statuses = [(await p).status for p in posts]
            after = _pending(await (await client.get("/metrics")).text())
            return before, during, statuses, after

    try:
        before, during, statuses, after = asyncio.run(go())
    finally:
        writer.release.set()
        api.pool.shutdown()
    assert statuses == [200, 200, 200]
    assert during - before == 3
    assert after == before
