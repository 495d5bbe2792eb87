"""One truth in the CLI and the web UI: a program with two known phases, recorded with the
BPF sampler (Python, native and CPython's own frames in one stack), gives the same top
functions in `kubeprof report` (text, JSON and HTML) and in the web UI's API, and the CLI's
`--keep-interpreter` and the UI's `keep-interpreter=1` change both the same way."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kubeprof.storage import Store
from kubeprof.ui.routes import Routes

pytestmark = [pytest.mark.bpf, pytest.mark.usefixtures("bpf_ready")]

KUBEPROF = str(Path(sys.executable).parent / "kubeprof")
# Two phases by CPU time: regex matching (C code inside CPython: _sre's sre_ucs1_* loops)
# for 1.5 s, then str.isalpha over words (_PyUnicode_IsAlpha, the eval loop) for 1.0 s.
PROGRAM = """
import re, sys, time

TEXT = "alpha beta gamma 12345 delta@example.com " * 4000

def cpu_for(seconds, fn):
    end = time.process_time() + seconds
    while time.process_time() < end:
        fn()

def extract_regex():
    re.findall(r"[a-z]+@[a-z]+\\.com", TEXT)

def count_alpha():
    sum(1 for w in TEXT.split() if w.isalpha())

cpu_for(1.5, extract_regex)
cpu_for(1.0, count_alpha)
"""


def kp(*args: str) -> str:
    run = subprocess.run(
        [KUBEPROF, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "KUBEPROF_CPU_SOURCE": "bpf"},  # native frames from the start
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("truth")
    (d / "phases.py").write_text(PROGRAM)
    url = f"sqlite:///{d}/s.db"
    kp("record", "-o", "phases", "--store", url, "--", sys.executable, str(d / "phases.py"))
    return url


def ui_get(url: str, path: str, **query: str) -> dict:
    store = Store.open(url)
    try:
        resp = Routes(store.engine).handle("GET", path, query)
    finally:
        store.close()
    assert resp.status == 200, resp.body
    return json.loads(resp.body)


def self_rows(text: str) -> list[str]:
    """Function names of the text report's first "Top functions by self time" table."""
    section = text.split("Top functions by self time", 1)[1].split("Top functions by total")[0]
    return [m[1] for m in re.finditer(r"^\s*[\d.]+%\s+[\d.]+%\s+[\d.]+ \w+\s+(.+)$", section, re.M)]


def html_top_self(url: str, tmp: Path, *flags: str) -> str:
    """The function with the most self time in `report -f html`'s embedded CPU flame graph
    (a node's value less its children's, summed per function: lines merged, as tables do)."""
    out = tmp / f"r{len(flags)}.html"
    kp("report", "phases", "-f", "html", "--out", str(out), "--store", url, *flags)
    raw = re.search(r'<script type="application/json" id="kp-data">(.*?)</script>', out.read_text())
    cpu = json.loads(raw[1])["views"]["cpu"]
    depth, value = cpu["depth"], cpu["value"]
    own = list(value)
    stack: list[int] = []
    for i, d in enumerate(depth):
        del stack[d:]
        if stack:
            own[stack[-1]] -= value[i]
        stack.append(i)
    by_function: dict[str, int] = {}
    for i, v in enumerate(own):
        label = re.sub(r":\d+\)$", ")", cpu["names"][cpu["name"][i]])
        by_function[label] = by_function.get(label, 0) + v
    return max(by_function, key=by_function.__getitem__)


def test_cli_and_ui_read_one_prepared_view(recorded, tmp_path):
    url = recorded
    page = "/api/v1/sessions/local/phases"
    for flag, query in (((), {}), (("--keep-interpreter",), {"keep-interpreter": "1"})):
        cli = json.loads(kp("report", "phases", "-f", "json", "--store", url, *flag))
        ui = ui_get(url, page, **query)
        # the same function, numbers and order: `report -f json`'s top_functions per view
        assert ui["reportTopFunctions"] == cli["top_functions"], flag
        # the page's table (by self time) and its flame graph's agree with the text report
        text = kp("report", "phases", "--store", url, "--width", "0", "--top", "5", *flag)
        by_self = [f["function"] for f in ui["topFunctions"]]
        graph = ui_get(url, page + "/flamegraph", view="cpu", **query)
        assert [f["function"] for f in graph["top"]][:3] == by_self[:3]
        assert self_rows(text)[0] == by_self[0], (flag, text[:3000])
        assert html_top_self(url, tmp_path, *flag) == by_self[0], flag

    folded = ui_get(url, page)
    kept = ui_get(url, page, **{"keep-interpreter": "1"})
    cli_folded = json.loads(kp("report", "phases", "-f", "json", "--store", url))
    totals = {f["function"]: f["total_ns"] for f in cli_folded["top_functions"]["cpu"]}
    # the known phases, by total time: regex 1.5 s of CPU, isalpha 1.0 s
    assert totals["extract_regex (phases.py)"] > totals["count_alpha (phases.py)"] > 0
    assert folded["topFunctions"][0]["kind"] == "python"  # self time lands on Python code

    # kept: CPython's C code (sre_ucs1_*, _PyUnicode_IsAlpha, the eval loop) takes self time
    assert kept["topFunctions"][0]["kind"] == "native"
    assert kept["reportTopFunctions"] != folded["reportTopFunctions"]
