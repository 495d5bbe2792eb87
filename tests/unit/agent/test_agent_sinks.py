"""The driver's sinks: the local store (with its last resort on disk) and the agent's spool."""

from __future__ import annotations

from pathlib import Path

from kubeprof.agent.cluster.client import Answer, Outcome
from kubeprof.agent.cluster.discovery import Discovery
from kubeprof.agent.cluster.shipper import Shipper
from kubeprof.agent.cluster.spool import Spool
from kubeprof.agent.cluster.spool_sink import SpoolSink
from kubeprof.agent.sinks import StoreSink
from kubeprof.model import Batch, CpuSample, Frame, FrameKind, GpuActivity, ProcessInfo
from kubeprof.protocol import codec

STACK = (Frame("main", FrameKind.PYTHON, "/x.py", 1),)


def _b(n: int) -> Batch:
    return Batch(samples=tuple(CpuSample(i, 7, 7, "t", 0, STACK) for i in range(n)))


class FlakyStore:
    """Refuses writes while `down`; counts rows like Store.write_batch."""

    def __init__(self, down: bool) -> None:
        self.down, self.written = down, []

    def write_batch(self, session_id: int, batch: Batch) -> int:
        if self.down:
            raise OSError("database is locked")
        self.written.append(batch)
        return len(batch.samples)


def test_store_sink_keeps_batches_while_the_store_fails(tmp_path: Path):
    store, logged = FlakyStore(down=True), []
    sink = StoreSink(store, 1, fallback=tmp_path / "unsaved", log=logged.append)  # type: ignore[arg-type]
    sink.write(_b(2))
    sink.write(Batch())  # empty: nothing kept
    sink.write(_b(3))
    assert len(sink.pending) == 2 and sink.rows == 0 and "database is locked" in logged[0]
    store.down = False
    sink.close()
    assert sink.rows == sink.records == 5 and sink.pending == [] and sink.kept_in is None
    assert not (tmp_path / "unsaved").exists()


def test_store_sink_last_resort_is_a_spool_in_the_batch_codec(tmp_path: Path):
    sink = StoreSink(
        FlakyStore(down=True),
        9,
        fallback=tmp_path / "unsaved",  # type: ignore[arg-type]
        log=lambda _m: None,
    )
    sink.write(_b(2))
    sink.write(Batch(processes=(ProcessInfo(7, 1, "py", "py x.py"),), counters={"c": 1}))
    sink.close()
    assert sink.kept_in == tmp_path / "unsaved"
    files = Spool(sink.kept_in).pending()
    assert len(files) == 1
    batch_id, _node, batch = codec.decode(files[0].path.read_bytes())
    assert batch_id.startswith("local-9-") and files[0].batch_id == batch_id
    assert len(batch.samples) == 2 and batch.samples[0].stack == STACK
    assert batch.processes[0].cmdline == "py x.py" and batch.counters == {"c": 1}


class FakeClient:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def post_batch(self, body: bytes, batch_id: str) -> Answer:
        self.bodies.append(body)
        return Answer(Outcome.STORED, 200, "", {"rows": 1})


def _spool_sink(tmp_path: Path, spool: Spool | None = None) -> tuple[SpoolSink, FakeClient]:
    client, spool = FakeClient(), spool or Spool(tmp_path / "spool")
    shipper = Shipper(spool, client)  # type: ignore[arg-type]
    return SpoolSink(
        spool, shipper, node="node-1", discovery=Discovery(tmp_path / "proc"), drain_timeout_s=1
    ), client


def test_spool_sink_spools_encoded_batches_and_ships_them_at_close(tmp_path: Path):
    sink, client = _spool_sink(tmp_path)
    sink.write(Batch())  # nothing to send: not spooled
    sink.write(_b(3))
    assert sink.batches == 1 and len(sink.spool.pending()) == 1 and client.bodies == []
    batch_id, node, batch = codec.decode(sink.spool.pending()[0].path.read_bytes())
    assert node == "node-1" and batch_id.startswith("node-1-") and len(batch.samples) == 3
    sink.close()
    assert sink.delivered and sink.spool.pending() == [] and len(client.bodies) == 1


def test_spool_sink_background_shipper_sends_and_stops(tmp_path: Path):
    sink, client = _spool_sink(tmp_path)
    sink.start()
    sink.write(_b(1))
    sink.close()
    assert sink.delivered and len(client.bodies) == 1 and not sink._thread.is_alive()


def test_spool_sink_reports_batches_the_full_spool_dropped(tmp_path: Path):
    spool = Spool(tmp_path / "spool", max_bytes=1)  # every put drops the older ones
    spool.put(b"old-1", "a")
    spool.put(b"old-2", "b")
    assert spool.dropped == 1
    sink, _client = _spool_sink(tmp_path, spool)
    sink.write(Batch())  # an empty pass still carries the count
    first = codec.decode(spool.pending()[-1].path.read_bytes())[2]
    assert first.counters == {"agent_spool_dropped": 1} and spool.dropped == 2
    sink.write(_b(1))  # only what was dropped since the last report
    second = codec.decode(spool.pending()[-1].path.read_bytes())[2]
    assert second.counters == {"agent_spool_dropped": 1} and len(second.samples) == 1


def test_spool_sink_splits_a_poll_larger_than_the_ingest_takes(tmp_path: Path):
    """A launch-bound GPU poll bigger than one ingest batch: every piece decodes within the
    ingest's default limits, and every record arrives exactly once (nothing quarantined)."""
    deep = tuple(Frame(f"f{i}", FrameKind.PYTHON, "/x.py", i) for i in range(120))
    kernels = tuple(
        GpuActivity("kernel", f"k{i % 7}", i * 10, i * 10 + 5, 0, 7, i, stack=deep)
        for i in range(60_000)
    )
    big = Batch(
        samples=_b(25_000).samples,
        gpu_activities=kernels,
        processes=(ProcessInfo(7, 1, "py", "py x.py"),),
        counters={"gpu_dropped": 0},
    )
    sink, _client = _spool_sink(tmp_path)
    sink.write(big)
    pieces = [codec.decode(f.path.read_bytes())[2] for f in sink.spool.pending()]
    assert len(pieces) == sink.batches > 1
    assert sum(len(p.gpu_activities) for p in pieces) == 60_000
    assert [a.correlation_id for p in pieces for a in p.gpu_activities] == list(range(60_000))
    assert sum(len(p.samples) for p in pieces) == 25_000
    assert pieces[0].processes == big.processes and pieces[0].counters == big.counters
    assert all(not p.processes and not p.counters for p in pieces[1:])
    assert all(a.stack == deep for p in pieces for a in p.gpu_activities)


def test_invalid_records_are_found_one_by_one_and_the_rest_kept():
    """What `StoreSink` leaves out after a refused write: exactly the records the ingest
    would refuse, each named by its field; a valid batch comes back as it was."""
    from kubeprof.agent.invalid_records import split

    kernels = tuple(
        GpuActivity("kernel", "k", i * 10, i * 10 + 5, 0, 7, -1 if i in (3, 17) else i)
        for i in range(40)
    )
    batch = Batch(samples=_b(5).samples, gpu_activities=kernels, counters={"c": 1})
    good, reasons = split(batch)
    assert [a.correlation_id for a in good.gpu_activities] == [
        i for i in range(40) if i not in (3, 17)
    ]
    assert good.samples == batch.samples and good.counters == {"c": 1}
    assert len(reasons) == 2 and reasons[0].startswith("gpu_activities[3]: ")
    assert reasons[1].startswith("gpu_activities[17]: ") and "correlation_id" in reasons[1]
    valid = _b(3)
    assert split(valid) == (valid, [])
    no_counters, why = split(Batch(samples=valid.samples, counters={"lost": -5}))
    assert no_counters == valid and why[0].startswith("counters: ")
