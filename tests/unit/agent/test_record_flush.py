"""Whatever ends a recording, what the collectors delivered is stored."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from kubeprof.agent.record import RecordError, RecordOptions, record
from kubeprof.model import Batch, CpuSample, Frame, FrameKind
from kubeprof.storage import Store
from kubeprof.storage import queries as q

STACK = (Frame("main", FrameKind.PYTHON, "/x.py", 1),)


class CountingSource:
    """A collector stand-in that yields one sample per poll and one more at stop; with
    `polled`, each poll touches that file (the command of `_until_polled` waits on it)."""

    def __init__(self, polled: Path | None = None) -> None:
        self.n = 0
        self.polled = polled
        self.targets: list[int] = []
        self.stopped = False
        self.warnings = ["no CPU samples for PID 1: it exited at once"]

    def add_target(self, pid: int) -> None:
        self.targets.append(pid)

    def _one(self) -> Batch:
        self.n += 1
        return Batch(samples=(CpuSample(self.n, 1, 1, "t", 0, STACK),))

    def _touch(self) -> None:
        if self.polled is not None:
            self.polled.touch()

    def poll(self) -> Batch:
        self._touch()
        return self._one()

    def stop(self) -> Batch:
        self.stopped = True
        return self._one()


def _until_polled(polled: Path) -> list[str]:
    """A command that runs until `polled` exists (60 s at most): the recorder polls only
    once its store is open, which on a loaded machine took longer than a fixed short
    sleep, and then the poll these tests count never came."""
    wait = (
        "import os, sys, time\n"
        "end = time.monotonic() + 60\n"
        "while not os.path.exists(sys.argv[1]) and time.monotonic() < end:\n"
        "    time.sleep(0.01)\n"
    )
    return [sys.executable, "-c", wait, str(polled)]


def _stored(url: str, name: str) -> int:
    store = Store.open(url)
    with store.engine.connect() as conn:
        n = q.find_session(conn, name).samples
    store.close()
    return n


def test_command_exit_flushes_everything(tmp_path):
    url = f"sqlite:///{tmp_path}/r.db"
    src = CountingSource(tmp_path / "polled")
    res = record(
        RecordOptions(
            command=_until_polled(src.polled),
            store_url=url,
            sources=[src],
            poll_interval_s=0.05,
            name="exit",
        )
    )
    assert res.exit_code == 0 and src.stopped and src.targets
    assert "no CPU samples for PID 1: it exited at once" in res.warnings
    assert _stored(url, "exit") == src.n >= 2


def test_duration_stops_the_command_and_keeps_samples(tmp_path):
    url = f"sqlite:///{tmp_path}/r.db"
    src = CountingSource()
    res = record(
        RecordOptions(
            command=[sys.executable, "-c", "import time; time.sleep(60)"],
            store_url=url,
            sources=[src],
            poll_interval_s=0.05,
            duration_s=1.5,  # 0.4 s once saw no poll before the stop in a loaded CI run
            name="dur",
        )
    )
    assert _stored(url, "dur") == src.n >= 2  # at least one poll, and the stop's
    assert res.rows == src.n


def test_ctrl_c_keeps_samples(tmp_path):
    url = f"sqlite:///{tmp_path}/r.db"
    src = CountingSource(tmp_path / "polled")

    def ctrl_c_after_a_poll() -> None:  # not after a fixed time: see _until_polled
        end = time.monotonic() + 60
        while not src.polled.exists() and time.monotonic() < end:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c_after_a_poll, daemon=True).start()
    record(
        RecordOptions(
            command=[sys.executable, "-c", "import time; time.sleep(60)"],
            store_url=url,
            sources=[src],
            poll_interval_s=0.05,
            name="int",
        )
    )
    store = Store.open(url)
    with store.engine.connect() as conn:
        info = q.find_session(conn, "int")
    store.close()
    assert info.status == "interrupted"
    assert info.samples == src.n >= 2


def test_missing_command_is_a_clear_error_and_session_kept(tmp_path):
    url = f"sqlite:///{tmp_path}/r.db"
    with pytest.raises(RecordError, match=r"cannot start 'no-such-cmd-kp'.*PATH"):
        record(
            RecordOptions(
                command=["no-such-cmd-kp"],
                store_url=url,
                sources=[CountingSource()],
                name="missing",
            )
        )
    assert _stored(url, "missing") == 1  # the stop() batch is still written


def test_store_down_to_the_end_leaves_the_batches_on_disk(tmp_path, monkeypatch):
    from kubeprof.agent.cluster.spool import Spool
    from kubeprof.protocol import codec

    url = f"sqlite:///{tmp_path}/r.db"

    def refuse(self, session_id, batch):
        raise OSError("disk full")

    monkeypatch.setattr(Store, "write_batch", refuse)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the kept folder: not /tmp's
    src, logged = CountingSource(tmp_path / "polled"), []
    res = record(
        RecordOptions(
            command=_until_polled(src.polled),
            store_url=url,
            sources=[src],
            poll_interval_s=0.05,
            name="down",
            log=logged.append,
        )
    )
    kept = [w for w in res.warnings if w.startswith("the store could not be written")]
    assert len(kept) == 1 and res.rows == 0
    folder = kept[0].split("data kept in ", 1)[1].split(" ", 1)[0]
    assert Path(folder).is_relative_to(tmp_path), folder
    (item,) = Spool(folder).pending()
    _bid, _node, batch = codec.decode(item.path.read_bytes())
    assert len(batch.samples) == src.n >= 2
    assert any("disk full" in m for m in logged)


class BrokenSource(CountingSource):
    def poll(self) -> Batch:
        self._touch()
        raise RuntimeError("ring buffer gone")


def test_a_failing_collector_is_named_and_the_others_still_stored(tmp_path):
    url = f"sqlite:///{tmp_path}/r.db"
    good, bad = CountingSource(), BrokenSource(tmp_path / "polled")
    res = record(
        RecordOptions(
            command=_until_polled(bad.polled),
            store_url=url,
            sources=[good, bad],
            poll_interval_s=0.05,
            name="iso",
        )
    )
    assert any("BrokenSource" in w and "ring buffer gone" in w for w in res.warnings)
    assert bad.stopped and _stored(url, "iso") == good.n + 1 >= 3


class OneBadSource(CountingSource):
    """Polls 3 samples a time; the first poll's second sample has a frame line no column
    holds (what a code object's line table read from reused memory once decoded to)."""

    def poll(self) -> Batch:
        self._touch()
        bad = self.n == 0
        rows = []
        for k in range(3):
            self.n += 1
            line = -18_744_146_661_623_044_296 if bad and k == 1 else 1
            rows.append(
                CpuSample(self.n, 1, 1, "t", 0, (Frame("f", FrameKind.PYTHON, "/x.py", line),))
            )
        return Batch(samples=tuple(rows))


def test_a_value_the_store_refuses_costs_its_record_not_the_session(tmp_path):
    """One sample's out-of-range frame line used to fail every batch's write: the session
    ended with 0 rows. Now only that sample is left out, and the warning names its field."""
    url = f"sqlite:///{tmp_path}/r.db"
    src, logged = OneBadSource(tmp_path / "polled"), []
    res = record(
        RecordOptions(
            command=_until_polled(src.polled),
            store_url=url,
            sources=[src],
            poll_interval_s=0.05,
            name="bad",
            log=logged.append,
        )
    )
    assert src.n >= 4  # the bad poll, and the stop's sample at least
    assert _stored(url, "bad") == res.rows == src.n - 1
    left_out = [w for w in res.warnings if "left out" in w]
    assert len(left_out) == 1 and left_out[0].startswith("1 record(s) left out")
    assert "samples[1]" in left_out[0] and "line" in left_out[0]
    assert any("1 record(s) refused" in m for m in logged)


def test_a_recording_leaves_no_temporary_folder_behind(tmp_path, monkeypatch):
    """Every `kubeprof record` made a kubeprof-* folder (the GPU socket's, the last resort's)
    and left it: thousands piled up in /tmp. Only unsaved batches keep it (test above)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    record(
        RecordOptions(
            command=[sys.executable, "-c", "pass"],
            store_url=f"sqlite:///{tmp_path}/r.db",
            sources=[CountingSource()],
            poll_interval_s=0.05,
            name="tmp",
        )
    )
    assert list(scratch.iterdir()) == []
