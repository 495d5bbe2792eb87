"""`kubeprof diff -f html` in a real browser: both sessions side by side, the tables in
the order of the text diff, red where B is slower. The screenshot is docs/images/diff.png's
source (KUBEPROF_DOCS_SHOTS=docs/images refreshes it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.unit.report.truth_store import store_fixture

KUBEPROF = str(Path(sys.executable).parent / "kubeprof")


def test_diff_page_shows_both_sessions_and_what_moved(browser, tmp_path, shots):
    url = f"sqlite:///{tmp_path}/d.db"
    store_fixture(url, "train_torch")
    store_fixture(url, "starved")
    out = tmp_path / "d.html"
    run = subprocess.run(
        [
            KUBEPROF,
            "diff",
            "train_torch",
            "starved",
            "-f",
            "html",
            "--out",
            str(out),
            "--store",
            url,
            "--top",
            "12",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    text = subprocess.run(
        [KUBEPROF, "diff", "train_torch", "starved", "--store", url, "--top", "12"],
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    browser.goto(out.as_uri(), "document.querySelectorAll('table').length === 3")
    sides = browser.eval("[...document.querySelectorAll('.side')].map(s => s.innerText)")
    assert sides[0].startswith("A: train_torch") and sides[1].startswith("B: starved")
    for side, name in zip(sides, ("train_torch", "starved"), strict=True):
        rep = json.loads(
            subprocess.run(
                [KUBEPROF, "report", name, "-f", "json", "--store", url],
                capture_output=True,
                text=True,
                timeout=300,
            ).stdout
        )
        assert f"GPU idle {100 * rep['headline']['idle_ratio']:.1f} %" in side  # as reported
    assert "Launch-bound" in sides[0] and "load_batch" in sides[1]
    names = browser.eval(
        "[...document.querySelectorAll('table')[0].querySelectorAll("
        "'td.name')].map(td => td.textContent)"
    )
    text_names = [
        line.rsplit("  ", 1)[-1]
        for line in text.split("== CPU time per function")[1].splitlines()[2:14]
    ]
    assert names == text_names  # the same rows in the same order as the text diff
    first = browser.eval(
        "(() => { const r = document.querySelector('table tr.up');"
        " return [r.querySelector('td.name').textContent,"
        " getComputedStyle(r).color]; })()"
    )
    assert first[0] == "load_batch (gpu_truth.py)" and first[1] == "rgb(187, 0, 0)"
    browser.screenshot(shots / "diff.png")
    if os.environ.get("KUBEPROF_DOCS_SHOTS"):
        browser.screenshot(Path(os.environ["KUBEPROF_DOCS_SHOTS"]) / "diff.png")
