"""`kubeprof report` text options through the installed command: --top, --width, and no
cut when the report goes into a pipe or file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kubeprof.model import Batch, CpuSample, Frame, FrameKind, ProcessInfo
from kubeprof.storage import Store

KUBEPROF = str(Path(sys.executable).parent / "kubeprof")


def _deep_session(url: str) -> None:
    deep = tuple(
        Frame(f"layer_{i:02d}", FrameKind.PYTHON, "/srv/model.py", i + 1) for i in range(25)
    )
    other = (
        Frame("<module>", FrameKind.PYTHON, "/srv/t.py", 1),
        Frame("f", FrameKind.PYTHON, "/srv/t.py", 2),
    )
    store = Store.open(url)
    sid = store.create_session("deep", command="python model.py", start_ns=1)
    samples = [CpuSample(ts_ns=i, pid=5, tid=5, thread="py", cpu=0, stack=deep) for i in range(30)]
    samples += [
        CpuSample(ts_ns=100 + i, pid=5, tid=5, thread="py", cpu=0, stack=other) for i in range(10)
    ]
    store.write_batch(
        sid, Batch(samples=tuple(samples), processes=(ProcessInfo(5, 1, "py", "python"),))
    )
    store.finish_session(sid, end_ns=10**9)
    store.close()


def _report(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KUBEPROF, "report", "deep", "--store", url, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_piped_report_keeps_whole_stacks_and_width_cuts_them(tmp_path):
    url = f"sqlite:///{tmp_path}/d.db"
    _deep_session(url)
    whole = _report(url)
    assert whole.returncode == 0, whole.stderr
    row = next(line for line in whole.stdout.splitlines() if line.endswith("layer_00 (model.py:1)"))
    assert row.count(" <- ") == 24 and len(row) > 100
    cut = _report(url, "--width", "60")
    tables = cut.stdout[cut.stdout.index("== CPU time") :]  # the findings text is not ours
    assert max(len(line) for line in tables.splitlines()) <= 60
    assert "layer_00 (model.py:1)" not in cut.stdout


def test_top_and_startup_frames_flags(tmp_path):
    url = f"sqlite:///{tmp_path}/t.db"
    _deep_session(url)
    text = _report(url, "--top", "1").stdout
    stacks = text[text.index("Top stacks") :].splitlines()[2:]
    assert stacks[0].split()[:2] == ["75.00%", "30"]
    assert [line for line in stacks[1:] if line.strip()] == []
    assert "thread py [5]" not in text  # one thread: no second copy of the tables
    by_total = _report(url).stdout.split("Top functions by total time")[1]
    assert "<module>" not in by_total.split("start-up frames")[0]
    assert (
        "<module> (t.py)"
        in _report(url, "--startup-frames", "--top", "30").stdout.split(
            "Top functions by total time"
        )[1]
    )


def test_bad_text_options_name_the_flag(tmp_path):
    for args, flag in ((["--top", "0"], "--top"), (["--width", "12"], "--width")):
        out = _report(f"sqlite:///{tmp_path}/n.db", *args)
        assert out.returncode == 2 and flag in out.stderr and "Traceback" not in out.stderr
