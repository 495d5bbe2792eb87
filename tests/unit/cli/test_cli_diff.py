"""`kubeprof diff A B` end to end: two real recordings of one program whose two functions
swap their share of the work, compared through the installed command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

KUBEPROF = str(Path(sys.executable).parent / "kubeprof")
PROGRAM = """
import sys, time

def spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

def alpha(seconds):
    spin(seconds)

def beta(seconds):
    spin(seconds)

alpha(float(sys.argv[1]))
beta(float(sys.argv[2]))
"""


# The BPF sampler from the start (no quick start with py-spy): one sampler for the whole
# run, the diff's arithmetic is what is tested.
BPF_FROM_THE_START = {**os.environ, "KUBEPROF_CPU_SOURCE": "bpf"}


def kp(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KUBEPROF, *args], capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("diff")
    prog = d / "swap.py"
    prog.write_text(PROGRAM)
    url = f"sqlite:///{d}/s.db"
    # By CPU time, not wall time: on a busy machine each function still gets its seconds.
    for name, a, b in (("before", "1.5", "0.5"), ("after", "0.5", "1.5")):
        # The diff is tested here, not the sampler: on this shared 2-core machine a
        # recording now and then keeps a handful of samples (seen once: 1 of ~200); such a
        # run is recorded again, and one that keeps failing fails the test.
        for _ in range(3):
            out = kp(
                "record",
                "-o",
                name,
                "--store",
                url,
                "--",
                sys.executable,
                str(prog),
                a,
                b,
                env=BPF_FROM_THE_START,
            )
            assert out.returncode == 0, out.stderr
            if _cpu_s(url, name) > 1.0:  # 2 s of CPU work at 99 Hz, some lost
                break
            kp("sessions", "rm", name, "--store", url)
        assert _cpu_s(url, name) > 1.0
    return url


def _cpu_s(url: str, name: str) -> float:
    rep = json.loads(kp("report", name, "-f", "json", "--store", url).stdout)
    return rep["cpu"]["samples"] / rep["cpu"]["hz"]


def test_diff_names_what_moved_with_seconds_and_points(two_runs):
    out = kp("diff", "before", "after", "-f", "json", "--sort", "total", "--store", two_runs)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["sessions"] == ["before", "after"]
    rows = data["tables"][0]["rows"]
    top = {r["name"]: r for r in rows[:2]}
    assert set(top) == {"alpha (swap.py)", "beta (swap.py)"}, [r["name"] for r in rows[:4]]
    alpha, beta = top["alpha (swap.py)"], top["beta (swap.py)"]
    # Total time (self is in `spin`): 75 % of the CPU time -> 25 % and back. Shares, not
    # seconds: on this loaded 2-core machine the sampler loses some samples (up to ~35 %
    # seen), evenly over the run.
    whole = data["tables"][0]["whole_s"]
    assert alpha["total_s"][0] / whole[0] > 0.6 and alpha["total_s"][1] / whole[1] < 0.4
    assert beta["total_s"][0] / whole[0] < 0.4 and beta["total_s"][1] / whole[1] > 0.6
    assert alpha["total_change_s"] < -0.3 and beta["total_change_s"] > 0.3
    assert alpha["total_change_points"] < -30 and beta["total_change_points"] > 30
    # The same numbers as each session's own report.
    for i, name in enumerate(("before", "after")):
        rep = json.loads(kp("report", name, "-f", "json", "--store", two_runs).stdout)
        totals = {f["function"]: f["total_ns"] for f in rep["top_functions"]["cpu"]}
        assert round(totals["alpha (swap.py)"] / 1e9, 6) == round(alpha["total_s"][i], 6)


def test_diff_text_and_html(two_runs, tmp_path):
    text = kp("diff", "before", "after", "--store", two_runs, "--top", "5")
    assert text.returncode == 0 and text.stdout.startswith("kubeprof diff: before -> after")
    assert "GPU idle: not measured" in text.stdout and "== CPU time per function" in text.stdout
    assert "GPU time per kernel" not in text.stdout  # no GPU data in either
    page = kp(
        "diff",
        "before",
        "after",
        "-f",
        "html",
        "--sort",
        "total",
        "--store",
        two_runs,
        cwd=tmp_path,
    )
    assert page.returncode == 0
    html = (tmp_path / "before-vs-after.diff.html").read_text()
    assert "alpha (swap.py)" in html and 'id="side-A"' in html and 'id="side-B"' in html


def test_diff_unknown_session_is_one_line(two_runs):
    out = kp("diff", "before", "nope", "--store", two_runs)
    assert out.returncode == 2 and "no session named 'nope'" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_compare_says_it_is_the_batch_size_tool(two_runs):
    out = kp("compare", "before", "after", "--store", two_runs)
    assert out.returncode == 0
    assert "no batch_size label" in out.stderr and "kubeprof diff before after" in out.stderr
