"""Spool on disk, and the shipper's retry/backoff policy, with a fake ingest client."""

import errno
from pathlib import Path

import pytest

from kubeprof.agent.cluster.client import Answer, Outcome, classify
from kubeprof.agent.cluster.shipper import Backoff, Shipper
from kubeprof.agent.cluster.spool import QUARANTINE, SUFFIX, Spool

GZ = b"\x1f\x8b"  # what the shipper checks before sending a spooled file


class FakeClient:
    """Answers from a script; records what was posted."""

    def __init__(self, script: list[int]) -> None:
        self.script = list(script)
        self.posted: list[str] = []

    def post_batch(self, body: bytes, batch_id: str) -> Answer:
        status = self.script.pop(0) if self.script else 200
        self.posted.append(batch_id)
        return Answer(
            classify(status) if status else Outcome.RETRY,
            status,
            "",
            {"rows": 1, "duplicate": status == 200 and batch_id in self.posted[:-1]},
        )


def test_spool_orders_and_survives_restart(tmp_path: Path):
    s = Spool(tmp_path)
    a, b = s.put(b"a", "id-a"), s.put(b"b", "id-b")
    assert [x.batch_id for x in s.pending()] == ["id-a", "id-b"]
    s.done(a)
    s2 = Spool(tmp_path)  # a restarted agent sees what is left, and appends after it
    c = s2.put(b"c", "id-c")
    assert [x.batch_id for x in s2.pending()] == ["id-b", "id-c"]
    assert c.path.name > b.path.name
    assert not list(tmp_path.glob(".*.tmp"))


def test_spool_limit_drops_oldest_and_counts(tmp_path: Path):
    s = Spool(tmp_path, max_bytes=250)
    for i in range(5):
        s.put(b"x" * 100, f"id-{i}")
    assert [x.batch_id for x in s.pending()] == ["id-3", "id-4"]
    assert s.dropped == 3


def test_retry_keeps_order_then_everything_arrives(tmp_path: Path):
    s = Spool(tmp_path)
    for i in range(3):
        s.put(GZ + b"x", f"id-{i}")
    client = FakeClient([0, 503, 200, 200, 200])  # network error, DB down, then fine
    sh = Shipper(s, client, backoff=Backoff(rand=lambda: 1.0), sleep=lambda _s: None)
    assert not sh.ship_once() and not sh.ship_once()
    assert sh.ship_once()
    assert client.posted == ["id-0", "id-0", "id-0", "id-1", "id-2"]
    assert s.pending() == [] and sh.stats.retries == 2 and sh.stats.sent == 3


def test_bad_body_is_set_aside_not_blocking(tmp_path: Path):
    s = Spool(tmp_path)
    s.put(GZ + b"x", "bad")
    s.put(GZ + b"y", "good")
    sh = Shipper(s, FakeClient([400, 200]))
    assert sh.ship_once()
    assert (tmp_path / "quarantine").is_dir() and sh.stats.rejected == 1


def test_forbidden_and_session_over_stop_sending_but_keep_data(tmp_path: Path):
    for status, flag in ((403, "forbidden"), (410, "session_over")):
        d = tmp_path / str(status)
        s = Spool(d)
        s.put(GZ + b"x", "id")
        sh = Shipper(s, FakeClient([status]))
        assert not sh.ship_once() and getattr(sh, flag)
        assert len(s.pending()) == 1


def test_backoff_doubles_to_cap_and_resets():
    b = Backoff(base_s=0.5, cap_s=4, rand=lambda: 1.0)
    assert [b.next_delay() for _ in range(6)] == [0.5, 1, 2, 4, 4, 4]
    b.reset()
    assert b.next_delay() == 0.5
    jittered = Backoff(base_s=1, rand=lambda: 0.0)
    assert jittered.next_delay() == 0.5  # full jitter stays within [ceiling/2, ceiling]


def test_drain_gives_up_at_deadline(tmp_path: Path):
    s = Spool(tmp_path)
    s.put(GZ + b"x", "id")
    now = [0.0]

    def sleep(sec: float) -> None:
        now[0] += sec

    sh = Shipper(s, FakeClient([503] * 100), backoff=Backoff(rand=lambda: 1.0), sleep=sleep)
    assert not sh.drain(10, now=lambda: now[0])
    assert 10 <= now[0] < 41 and len(s.pending()) == 1


def test_classify():
    assert classify(200) is Outcome.STORED
    assert classify(503) is classify(500) is classify(429) is Outcome.RETRY
    assert classify(400) is Outcome.REJECTED
    assert classify(401) is classify(403) is Outcome.FORBIDDEN
    assert classify(404) is classify(410) is Outcome.SESSION_OVER


def test_foreign_entries_are_quarantined_and_start_does_not_crash(tmp_path: Path):
    (tmp_path / f"notanumber-x{SUFFIX}").write_bytes(GZ)  # crashed the start before
    (tmp_path / f"000000000007-dir{SUFFIX}").mkdir()  # killed the shipper before
    (tmp_path / f"000000000003-junk{SUFFIX}").write_bytes(b"not gzip")
    (tmp_path / ".000000000009-x.batch.gz.tmp").write_bytes(b"half")  # a cut write
    s = Spool(tmp_path)
    good = s.put(GZ + b"ok", "good")
    assert good is not None and not list(tmp_path.glob(".*.tmp"))
    sh = Shipper(s, FakeClient([]))
    assert sh.ship_once()
    q = sorted(p.name for p in (tmp_path / QUARANTINE).iterdir())
    assert q == [f"000000000003-junk{SUFFIX}", f"000000000007-dir{SUFFIX}", f"notanumber-x{SUFFIX}"]
    assert sh.client.posted == ["good"] and s.quarantined == 3 and s.pending() == []


def test_poison_batch_then_good_ones_all_delivered(tmp_path: Path):
    s = Spool(tmp_path)
    for i in range(4):
        s.put(GZ + b"x", f"id-{i}")
    sh = Shipper(s, FakeClient([422, 200, 413, 200]))
    assert sh.ship_once()
    assert sh.stats.sent == 2 and sh.stats.rejected == 2 and s.pending() == []


def test_disk_full_drops_oldest_never_raises(tmp_path: Path, monkeypatch):
    s = Spool(tmp_path)
    for i in range(3):
        s.put(GZ + b"x", f"id-{i}")
    real_write = Spool._write
    fails = [2]  # the disk is full for two attempts, then there is room again

    def write(self, name, body):
        if fails[0]:
            fails[0] -= 1
            tmp = self.folder / f".{name}.tmp"
            tmp.write_bytes(b"partial")
            try:
                raise OSError(errno.ENOSPC, "No space left on device")
            finally:
                tmp.unlink()
        return real_write(self, name, body)

    monkeypatch.setattr(Spool, "_write", write)
    assert s.put(GZ + b"new", "id-new") is not None
    assert [x.batch_id for x in s.pending()] == ["id-2", "id-new"]
    assert s.dropped == 2 and "disk full" in s.problem
    fails[0] = 99  # full for good, nothing left to drop: the batch itself is dropped
    assert s.put(GZ + b"more", "id-more") is None
    assert s.pending() == [] and s.dropped == 5
    assert not list(tmp_path.glob(".*.tmp"))


def test_real_enospc_leaves_no_temp_file(tmp_path: Path, monkeypatch):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    from kubeprof.agent.cluster import spool as spool_module

    s = Spool(tmp_path)
    s.put(GZ + b"x", "old")

    def full_open(path, mode="r", *a, **k):
        # The kernel's /dev/full answers every write with ENOSPC; the tmp file exists as
        # it would on a full disk.
        Path(path).write_bytes(b"")
        return open("/dev/full", mode, *a, **k)

    monkeypatch.setattr(spool_module, "open", full_open, raising=False)
    assert s.put(GZ + b"y", "new") is None
    assert s.dropped == 2 and not list(tmp_path.glob(".*.tmp")) and s.pending() == []
