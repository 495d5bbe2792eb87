"""`--view off-cpu` and `--view wall` in every format: waits weighted by their time, on and
off CPU added per thread, and a thread that only waited shown."""

from __future__ import annotations

import gzip
import json

import pytest

from kubeprof.model import Frame, FrameKind
from kubeprof.report import formats, header
from kubeprof.report.collapsed import parse_collapsed, render_collapsed
from kubeprof.report.views import available_views
from kubeprof.reportdata import Profile, Report, WeightedStack
from kubeprof.storage.offcpu import wait_frame

MAIN = Frame("main", FrameKind.PYTHON, "/app/w.py", 1)
COMPUTE = Frame("compute", FrameKind.PYTHON, "/app/w.py", 5)
READ = Frame("read_pipe", FrameKind.PYTHON, "/app/w.py", 9)
GET = Frame("get_queue", FrameKind.PYTHON, "/app/w.py", 13)


def _profile() -> Profile:
    cpu = (WeightedStack((MAIN, COMPUTE), 7, 7, "main", "python", 30, 300_000_000),)
    off = (
        WeightedStack((MAIN, READ, wait_frame("read")), 7, 7, "main", "python", 10, 500_000_000),
        WeightedStack((GET, wait_frame("futex")), 7, 8, "waiter", "python", 2, 900_000_000),
    )
    return Profile("s", 100, 1.0, cpu=cpu, offcpu=off)


def test_views_offered_only_with_data():
    assert available_views(_profile()) == ["cpu", "off-cpu", "wall"]
    assert available_views(Profile("s", 100, 1.0, cpu=_profile().cpu)) == ["cpu"]


def test_collapsed_off_cpu_and_wall_weigh_nanoseconds():
    off = parse_collapsed(render_collapsed(_profile(), view="off-cpu"))
    read = tuple(f.label() for f in (MAIN, READ, wait_frame("read")))
    assert off[read] == 500_000_000
    wall = parse_collapsed(render_collapsed(_profile(), view="wall", group="thread"))
    per_thread: dict[str, int] = {}
    for key, ns in wall.items():
        per_thread[key[1]] = per_thread.get(key[1], 0) + ns
    # on (300 ms) + off (500 ms) for main; the waiter only waited and is still there
    assert sorted(per_thread.values()) == [800_000_000, 900_000_000]


@pytest.mark.parametrize("fmt", ["text", "json", "html", "collapsed", "pprof", "speedscope"])
@pytest.mark.parametrize("view", ["off-cpu", "wall"])
def test_every_format_renders_the_waiting_thread(fmt, view):
    out = formats.render(Report(_profile()), fmt, view=view)
    text = gzip.decompress(out).decode(errors="replace") if isinstance(out, bytes) else out
    assert "get_queue" in text and "[off-cpu] futex" in text


def test_json_lists_top_functions_per_view():
    doc = json.loads(formats.render(Report(_profile()), "json"))
    off = {f["function"]: f["total_ns"] for f in doc["top_functions"]["off-cpu"]}
    assert any("get_queue" in k and v == 900_000_000 for k, v in off.items())
    wall = {f["function"]: f["total_ns"] for f in doc["top_functions"]["wall"]}
    assert any("main" in k and v == 800_000_000 for k, v in wall.items())


def test_header_says_which_waits_are_left_out_and_their_time():
    meta = {
        "counter.offcpu_short": "1200",
        "counter.offcpu_short_ns": "300000000",
        "counter.offcpu_unattributed": "7",
        "counter.offcpu_unattributed_ns": "21000000",
        "counter.offcpu_ring_full": "2",
    }
    prof = Profile("s", 100, 1.0, cpu=_profile().cpu, offcpu=_profile().offcpu, meta=meta)
    words = dict(header.profile_items(prof))["off-CPU"]
    assert words.startswith("12 waits, 1.40 s")
    assert "1,200 shorter than the minimum (300.0 ms)" in words
    assert "7 outside a syscall" in words and "21.0 ms" in words
    assert "2 lost" in words
    assert "off-CPU" not in dict(header.profile_items(Profile("s", 100, 1.0)))
