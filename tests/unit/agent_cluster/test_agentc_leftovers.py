"""Leftovers and trust on the agent side (issue 32, item 6): the backoff holds under kick(),
a spool's cleanup never follows a symlink, a re-created session gets its own spool."""

import os
import threading
import time
from pathlib import Path

from kubeprof.agent.cluster.client import Answer, Outcome
from kubeprof.agent.cluster.shipper import Backoff, Shipper
from kubeprof.agent.cluster.spool import QUARANTINE, Spool
from kubeprof.protocol.settings import spool_folder

GZ = b"\x1f\x8b"


class DownClient:
    """An ingest that is down: every post is a network error."""

    def __init__(self) -> None:
        self.attempts = 0

    def post_batch(self, body: bytes, batch_id: str) -> Answer:
        self.attempts += 1
        return Answer(Outcome.RETRY, 0, "connection refused", {})


def test_kick_does_not_defeat_the_backoff_during_an_outage(tmp_path: Path):
    spool = Spool(tmp_path)
    spool.put(GZ + b"first", "b-0")
    client = DownClient()
    shipper = Shipper(spool, client, Backoff(base_s=0.2, cap_s=5.0))  # type: ignore[arg-type]
    stop = threading.Event()
    t = threading.Thread(target=shipper.run, args=(stop,))
    t.start()
    try:
        end = time.monotonic() + 2.0
        i = 0
        while time.monotonic() < end:  # the agent spools a batch every poll and kicks
            i += 1
            spool.put(GZ + b"more", f"b-{i}")
            shipper.kick()
            time.sleep(0.01)
    finally:
        stop.set()
        shipper.kick()
        t.join(10)
    # Delays of at least 0.1, 0.2, 0.4, 0.8 s (half of 0.2 * 2^n, jittered) fit 2 s at
    # most five times; before, each of the ~150 kicks was an attempt.
    assert 2 <= client.attempts <= 6, client.attempts


def test_trimming_quarantine_never_follows_a_symlink(tmp_path: Path):
    outside = tmp_path / "precious"
    outside.mkdir()
    for i in range(5):
        (outside / f"f{i}").write_bytes(b"x" * 4000)
    folder = tmp_path / "spool"
    spool = Spool(folder, max_bytes=4000)  # quarantine keeps a quarter: 1000 bytes
    os.symlink(outside, folder / QUARANTINE)
    bad = spool.put(b"not gzip" * 100, "b-1")
    assert bad is not None
    spool.quarantine(bad.path, "is not a gzip batch")
    assert sorted(p.name for p in outside.iterdir()) == [f"f{i}" for i in range(5)]
    assert (folder / QUARANTINE).is_dir() and not (folder / QUARANTINE).is_symlink()


def test_a_session_recreated_under_its_name_gets_its_own_spool():
    assert spool_folder("ml", "train", "uid-1") != spool_folder("ml", "train", "uid-2")
    assert spool_folder("ml", "train") == "ml_train"  # a hand-started agent without a UID
    longest = spool_folder("n" * 63, "s" * 180, "0b6f2d3c-1111-4a4a-9c9c-000000000001")
    assert len(longest.encode()) <= 255
