"""Spool on disk, and the shipper's retry/backoff policy, with a fake ingest client."""

from pathlib import Path

from kubeprof.agent.cluster.client import Answer, Outcome, classify
from kubeprof.agent.cluster.shipper import Backoff, Shipper
from kubeprof.agent.cluster.spool import Spool


class FakeClient:
    """Answers from a script; records what was posted."""

    def __init__(self, script: list[int]) -> None:
        self.script = list(script)
        self.posted: list[str] = []

    def post_batch(self, body: bytes, batch_id: str) -> Answer:
        status = self.script.pop(0) if self.script else 200
        self.posted.append(batch_id)
        return Answer(classify(status) if status else Outcome.RETRY, status, "",
                      {"rows": 1, "duplicate": status == 200 and batch_id in self.posted[:-1]})


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
        s.put(b"x", f"id-{i}")
    client = FakeClient([0, 503, 200, 200, 200])  # network error, DB down, then fine
    sh = Shipper(s, client, backoff=Backoff(rand=lambda: 1.0), sleep=lambda _s: None)
    assert not sh.ship_once() and not sh.ship_once()
    assert sh.ship_once()
    assert client.posted == ["id-0", "id-0", "id-0", "id-1", "id-2"]
    assert s.pending() == [] and sh.stats.retries == 2 and sh.stats.sent == 3


def test_bad_body_is_set_aside_not_blocking(tmp_path: Path):
    s = Spool(tmp_path)
    s.put(b"x", "bad")
    s.put(b"y", "good")
    sh = Shipper(s, FakeClient([400, 200]))
    assert sh.ship_once()
    assert (tmp_path / "rejected").is_dir() and sh.stats.rejected == 1


def test_forbidden_and_session_over_stop_sending_but_keep_data(tmp_path: Path):
    for status, flag in ((403, "forbidden"), (410, "session_over")):
        d = tmp_path / str(status)
        s = Spool(d)
        s.put(b"x", "id")
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
    s.put(b"x", "id")
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
