from __future__ import annotations

import gzip
import shutil
import subprocess

import pytest

from kubeprof.report.pprof import render_pprof
from kubeprof.report.protowire import Message, fields, to_int64, unpack, varint
from tests.support.pprof_read import parse_pprof

from .sample_profile import PERIOD


def test_cpu_profile_parses_back_with_totals(profile):
    data = render_pprof(profile)
    assert data[:2] == b"\x1f\x8b"  # gzip
    prof = parse_pprof(data)
    assert prof.sample_types == [("samples", "count"), ("cpu", "nanoseconds")]
    assert prof.period_type == ("cpu", "nanoseconds")
    assert prof.period == PERIOD
    assert prof.duration_ns == 2_000_000_000
    assert prof.default_sample_type == "cpu"
    assert "session=unit-session" in prof.comments
    assert prof.total("samples") == 200
    assert prof.total("cpu") == 200 * PERIOD
    assert len(prof.samples) == 4


def test_stacks_frames_and_labels(profile):
    prof = parse_pprof(render_pprof(profile))
    by_leaf = {s.stack[-1][0]: s for s in prof.samples}
    memcpy = by_leaf["memcpy"]
    assert memcpy.stack == (
        ("worker_loop", "/srv/app.py", 30),
        ("hot", "/srv/app.py", 12),
        ("memcpy", "/lib/libc.so.6", 0),
    )
    assert memcpy.values == (60, 60 * PERIOD)
    assert memcpy.labels == {"pid": 10, "tid": 11, "thread": "worker", "process": "python"}
    assert by_leaf["page_fault_[k]"].labels["process"] == "sha256sum"


def test_gpu_view_sample_types(profile):
    prof = parse_pprof(render_pprof(profile, view="gpu"))
    assert prof.sample_types == [("launches", "count"), ("gpu", "nanoseconds")]
    assert prof.total("launches") == 40
    assert prof.total("gpu") == 4_000_000
    assert {s.stack[-1][0] for s in prof.samples} == {"sgemm_[gpu]", "add_kernel_[gpu]"}


def test_output_is_deterministic(profile):
    assert render_pprof(profile) == render_pprof(profile)


def test_protowire_round_trip():
    msg = Message().number(1, 300).number(2, 0).number(3, -5).blob(4, b"hi").packed(5, [1, 2**40])
    got = list(fields(msg.encode()))
    assert got == [(1, 300), (3, 2**64 - 5), (4, b"hi"), (5, varint(1) + varint(2**40))]
    assert to_int64(got[1][1]) == -5
    assert unpack(got[3][1]) == [1, 2**40]


@pytest.mark.skipif(shutil.which("go") is None, reason="go is not on PATH")
def test_go_tool_pprof_opens_it(profile, tmp_path):
    path = tmp_path / "cpu.pb.gz"
    path.write_bytes(render_pprof(profile))
    # The first call may build pprof into Go's build cache: allow minutes.
    top = subprocess.run(
        ["go", "tool", "pprof", "-top", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    assert "Type: cpu" in top
    rows = {line.split()[-1]: line.split() for line in top.splitlines() if "%" in line}
    assert rows["hot"][:2] == ["800ms", "40.00%"]  # flat 80 samples of 10 ms
    assert rows["memcpy"][1] == "30.00%"
    raw = subprocess.run(
        ["go", "tool", "pprof", "-raw", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    assert "samples/count cpu/nanoseconds" in raw
    assert "thread:[worker]" in raw and "pid:[20]" in raw
    assert "/srv/app.py:12" in raw


def test_raw_uncompressed_also_parses(profile):
    assert parse_pprof(gzip.decompress(render_pprof(profile))).total("samples") == 200
