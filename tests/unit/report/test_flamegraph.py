from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kubeprof.model import Frame, FrameKind
from kubeprof.report.flamegraph import render_html
from tests.support.synthetic import synthetic_profile

from .sample_profile import PERIOD, ws

HARNESS = Path(__file__).with_name("flamegraph_harness.js")
needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not on PATH")


def embedded(page: str) -> dict:
    raw = re.search(r'<script type="application/json" id="kp-data">(.*?)</script>', page, re.S)
    assert raw, "embedded data not found"
    return json.loads(raw.group(1))


def run_page(tmp_path: Path, page: str, search: str) -> dict:
    path = tmp_path / "page.html"
    path.write_text(page, encoding="utf-8")
    out = subprocess.run(
        ["node", str(HARNESS), str(path), search],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)


def test_self_contained(profile):
    page = render_html(profile)
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)\s*=", page, re.I)
    assert "http://" not in page and "https://" not in page
    assert "@import" not in page and "url(" not in page
    assert "{{" not in page  # every template slot filled


def test_embedded_views_and_totals(profile):
    data = embedded(render_html(profile))
    assert data["initial"] == "cpu"
    assert set(data["views"]) == {"cpu", "gpu"}
    cpu, gpu = data["views"]["cpu"], data["views"]["gpu"]
    assert cpu["value"][0] * cpu["scale"] == 200 * PERIOD
    assert cpu["samples"][0] == 200
    assert gpu["value"][0] * gpu["scale"] == 4_000_000 and gpu["unit"] == "launches"
    assert "hot (app.py:12)" in cpu["names"]
    kinds = {name: data["kinds"][k] for name, k in zip(gpu["names"], gpu["kinds"], strict=True)}
    assert kinds["sgemm_[gpu]"] == "gpu" and kinds["cudaLaunchKernel"] == "cuda_api"
    assert len(cpu["name"]) == len(cpu["depth"]) == len(cpu["value"]) == len(cpu["samples"])


def test_header_extra_sections_and_escaping(profile):
    evil = Frame("</script><script>alert(1)</script>", FrameKind.NATIVE)
    prof = dataclasses.replace(profile, session="<b>s</b>", cpu=(*profile.cpu, ws((evil,), 1)))
    page = render_html(
        prof, extra_sections=[("GPU idle <ratio>", "<table><tr><td>42%</td></tr></table>")]
    )
    assert "kubeprof: &lt;b&gt;s&lt;/b&gt;" in page
    assert "<h2>GPU idle &lt;ratio&gt;</h2>\n<table><tr><td>42%</td></tr></table>" in page
    assert page.count("</script>") == 2  # the data cannot close its script element
    assert "</script><script>alert(1)</script>" in embedded(page)["views"]["cpu"]["names"]
    assert page.index("kp-canvas") < page.index("GPU idle")  # sections sit under the graph


def test_cpu_only_profile_has_one_view(profile):
    data = embedded(render_html(dataclasses.replace(profile, gpu=())))
    assert list(data["views"]) == ["cpu"]
    assert embedded(render_html(profile, view="gpu"))["initial"] == "gpu"


@needs_node
def test_page_script_runs_zooms_searches_and_toggles(profile, tmp_path):
    out = run_page(tmp_path, render_html(profile), "hot")
    assert out["views"] == ["CPU time", "GPU time"]
    assert out["initialStatus"].startswith("CPU time: 2.00 s total;")
    assert out["initialRects"] > 5
    assert "200 samples, 2.00 s (100.00% of total" in out["rootTip"]
    assert out["deepTip"].startswith("main (app.py:3)\npython frame\n100 samples, 1.00 s (50.00%")
    assert "zoomed into \u201cmain (app.py:3)\u201d" in out["zoomStatus"]
    assert out["match"] == "matched: 70.00% of total, 80.00% of view"  # hot under main: 80/100
    assert out["matchUnzoomed"] == "matched: 70.00% of total"  # hot: 140 of 200 samples
    assert out["gpuStatus"].startswith("GPU time: 4.0 ms total;")


def test_hundred_thousand_stacks(tmp_path):
    prof = synthetic_profile(100_000, gpu_stacks=2_000)
    page = render_html(prof)
    assert len(page.encode()) < 30 * 1024 * 1024
    data = embedded(page)
    cpu = data["views"]["cpu"]
    assert cpu["value"][0] * cpu["scale"] == sum(w.value_ns for w in prof.cpu)
    assert (
        sum(1 for d, nxt in zip(cpu["depth"], [*cpu["depth"][1:], 0], strict=True) if nxt <= d)
        == 100_000
    )
    if shutil.which("node"):
        out = run_page(tmp_path, page, "layer1_fn7")
        drawn = int(out["initialStatus"].split(" drawn")[0].split()[-1].replace(",", ""))
        assert 0 < drawn < len(cpu["name"])  # sub-pixel frames are skipped
        assert out["matchUnzoomed"].startswith("matched: ")


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_headless_chromium_runs_the_page(profile, tmp_path):
    path = tmp_path / "page.html"
    path.write_text(render_html(profile), encoding="utf-8")

    def dom(url: str) -> str:
        cmd = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout

    def text_of(page: str, element_id: str) -> str:
        found = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', page)
        return found.group(1) if found else ""

    first = dom(path.as_uri())
    assert text_of(first, "kp-status").startswith("CPU time: 2.00 s total;")
    assert 'aria-pressed="true"' in first  # the view toggle was built
    gpu = dom(path.as_uri() + "#view=gpu&search=sgemm")  # start state from the URL
    assert text_of(gpu, "kp-status").startswith("GPU time: 4.0 ms total;")
    assert text_of(gpu, "kp-match") == "matched: 75.00% of total"
