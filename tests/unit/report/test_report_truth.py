"""Golden tests of `kubeprof report` (text and JSON) on the H200 ground-truth recordings:
each fixture is stored as `kubeprof record` would have, read back through the real queries
(`reporting.load`), and the report must show the finding each workload was built to cause,
a headline within 5 points of the workload's own CUDA-event idle, and no figure without data.
"""

from __future__ import annotations

import json

import pytest

from kubeprof import reporting
from kubeprof.report.formats import render

from .truth_store import TRUTH, store_fixture

pytestmark = pytest.mark.skipif(not TRUTH.is_dir(), reason="no tests/fixtures/gpu/truth")
_CACHE: dict[str, tuple[dict, str, dict]] = {}


@pytest.fixture(scope="module")
def store_url(tmp_path_factory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('truth') / 'kp.db'}"


def report_of(url: str, mode: str) -> tuple[dict, str, dict]:
    """(truth, text report, parsed JSON report) of fixture `mode`."""
    if mode not in _CACHE:
        truth = store_fixture(url, mode)
        report = reporting.load(url, mode)
        _CACHE[mode] = (truth, render(report, "text"), json.loads(render(report, "json")))
    return _CACHE[mode]


def flat(text: str) -> str:
    return " ".join(text.split())


def findings_section(text: str) -> str:
    return text.split("\nFindings\n========\n", 1)[1].split("\nGPU idle (steady state)\n")[0]


def kinds(doc: dict) -> set[str]:
    return {f["kind"] for f in doc["findings"]}


def test_text_puts_findings_first_then_the_steady_state_then_tables(store_url):
    _, text, _ = report_of(store_url, "starved")
    order = [
        text.index(s)
        for s in ("\nFindings\n", "\nGPU idle (steady state)\n", "\n== CPU time", "\nGPU\n===\n")
    ]
    assert order == sorted(order)
    head = text.split("\nFindings\n")[0]
    assert "counter." not in head and "cpu: True" not in head
    assert "py-spy" in head  # the CPU source is named


def test_starved_names_load_batch_in_text_and_json(store_url):
    truth, text, doc = report_of(store_url, "starved")
    fs = flat(findings_section(text))
    assert "[CRITICAL] GPU starved by the CPU" in fs and "load_batch (gpu_truth.py:" in fs
    assert "estimated gain:" in fs and "model: upper bound" in fs
    assert "CPU during idle (py-spy): during it the launching thread" in flat(text)
    assert "was in load_batch (gpu_truth.py:" in flat(text)
    f = next(f for f in doc["findings"] if f["kind"] == "gpu_starved")
    assert f["severity"] == "critical" and "load_batch" in f["message"]
    assert {"view": "cpu", "search": doc["cpu_during_idle"]["hot"]["frame"]} in f["targets"]
    assert doc["cpu_during_idle"]["hot"]["frame"].startswith(truth["host_functions"][0])
    assert doc["cpu_during_idle"]["source"] == "py-spy" == doc["cpu"]["source"]
    assert doc["breakdown"]["shares"]["host"] > 0.8
    assert "gpu_starved" in kinds(doc) and "launch_bound" not in kinds(doc)


def test_item_names_the_read_loss_line(store_url):
    truth, text, doc = report_of(store_url, "item")
    f = next(f for f in doc["findings"] if f["kind"] == "sync_stall")
    assert any(
        line.split(" ")[0].endswith(f":{truth['sync_line']}") and "read_loss" in line
        for line in f["evidence"]["lines"]
    )
    assert {"view": "cpu", "search": f"read_loss (gpu_truth.py:{truth['sync_line']})"} in f[
        "targets"
    ]
    assert "read_loss" in findings_section(text) and "Host-device sync stalls" in text


def test_pageable_names_copy_batch(store_url):
    truth, text, doc = report_of(store_url, "pageable")
    f = next(f for f in doc["findings"] if f["kind"] == "pageable_memcpy")
    assert any(
        "copy_batch" in line and line.split(" ")[0].endswith(f":{truth['copy_line']}")
        for line in f["evidence"]["lines"]
    )
    assert "copy_batch" in findings_section(text) and "Pageable memory copies" in text


def test_compute_fires_neither_starved_nor_launch_bound(store_url):
    _, text, doc = report_of(store_url, "compute")
    assert not kinds(doc) & {"gpu_starved", "launch_bound"}
    fs = findings_section(text)
    assert "GPU starved" not in fs and "Launch-bound" not in fs


@pytest.mark.parametrize("mode", ["compute", "half", "starved"])
def test_headline_agrees_with_the_cuda_event_truth(store_url, mode):
    truth, text, doc = report_of(store_url, mode)
    h = doc["headline"]
    assert h["source"] == "cupti" and h["idle_ratio"] is not None
    assert abs(h["idle_ratio"] - truth["idle_ratio"]) < 0.05, (h, truth["idle_ratio"])
    assert f"GPU idle {100 * h['idle_ratio']:.1f} % of the steady state" in flat(text)
    ph = doc["phases"]
    assert ph["steady"]["start_ns"] == h["window"]["start_ns"]
    for name in ("start-up", "warm-up", "steady", "tail"):
        assert f"\n  {name} " in text  # each phase on its own line
    assert ph["startup"]["idle_ratio"] > 0.95  # start-up shown apart, not in the headline


def test_json_is_the_whole_report(store_url):
    _, _, doc = report_of(store_url, "starved")
    for key in (
        "schema",
        "session",
        "meta",
        "cpu",
        "gpu_tracing",
        "headline",
        "phases",
        "timeline",
        "breakdown",
        "cpu_during_idle",
        "findings",
        "top_functions",
        "top_stacks",
        "gpu",
    ):
        assert key in doc, key
    assert doc["schema"] == "kubeprof.report/1" and doc["session"]["name"] == "starved"
    assert doc["gpu_tracing"] == {"traced": True, "reason": None}
    tl = doc["timeline"]
    assert tl["bucket_ns"] == 100_000_000 and len(tl["busy_ns"]) == len(tl["idle_ratio"]) > 50
    assert sum(tl["busy_ns"]) == doc["phases"]["session"]["busy_ns"]
    assert doc["gpu"]["top_kernels"][0]["name"].startswith("nvjet")
    assert doc["top_functions"]["cpu"] and doc["top_stacks"]["gpu"]
    assert doc["meta"]["counter.gpu_kernels"] == "229"


def test_html_has_the_findings_panel_on_top_with_frame_links(store_url):
    report_of(store_url, "starved")  # stored once per module
    page = render(reporting.load(store_url, "starved"), "html")
    top = page.index('<section class="kp-top">')
    assert top < page.index('id="kp-canvas"') < page.index('<section class="kubeprof-gpu">')
    assert 'class="kp-frame" data-view="cpu" data-search="load_batch (gpu_truth.py:' in page
    assert '<svg class="kp-timeline"' in page and ">steady</text>" in page
    header = page.split("</header>")[0]
    assert "counter." not in header and "cpu_source" not in header and ">False<" not in header
    assert "python3 [" in header  # processes named
    assert page.count("<h2>GPU</h2>") == 1


@pytest.mark.parametrize(
    "meta, reason",
    [
        (
            {
                "gpu_tracer": "off",
                "gpu_tracer_reason": "cupti-python is installed but its dependency "
                "'elftools' is missing; pip install pyelftools (pid 624)",
            },
            "'elftools' is missing",
        ),
        ({}, "no kernel was recorded and the tracer reported no reason"),
    ],
)
def test_no_kernels_means_not_measured_with_the_reason(tmp_path, meta, reason):
    url = f"sqlite:///{tmp_path / 'off.db'}"
    store_fixture(url, "starved", drop_kernels=True, meta=meta)
    report = reporting.load(url, "starved")
    text = render(report, "text")
    flat_text = flat(text)
    assert "GPU idle: not measured (GPU tracing was off: " in flat_text and reason in flat_text
    gpu = text.split("\nGPU\n===\n")[1]
    assert "attributed to a Python stack" not in gpu and "idle 0.0 %" not in gpu
    assert "session 100.0 %" not in gpu and "memcpy: 0.00 ms" not in gpu
    assert "GPU idle ratio (all GPUs):" in gpu and "from NVML device utilisation" in gpu
    doc = json.loads(render(report, "json"))
    assert doc["gpu_tracing"]["traced"] is False and reason in doc["gpu_tracing"]["reason"]
    assert doc["headline"]["source"] == "nvml"  # the labelled fallback, never CUPTI's 0 %
    assert doc["phases"]["steady"]["idle_ratio"] is None and doc["breakdown"] is None
    assert doc["gpu"]["attributed_share"] is None and doc["findings"] == []
    page = render(report, "html")
    assert "not measured" in page and reason.replace("'", "&#x27;") in page


def test_clicking_a_finding_searches_its_frame_in_the_flame_graph(store_url, tmp_path):
    import shutil
    import subprocess
    from pathlib import Path

    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    _, _, doc = report_of(store_url, "starved")
    target = next(f for f in doc["findings"] if f["kind"] == "gpu_starved")["targets"][0]
    page = tmp_path / "starved.html"
    page.write_text(render(reporting.load(store_url, "starved"), "html"), encoding="utf-8")
    harness = Path(__file__).with_name("flamegraph_harness.js")
    out = json.loads(
        subprocess.run(
            ["node", str(harness), str(page), "main", json.dumps(target)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
    )
    assert out["link"]["prevented"] and out["link"]["search"] == target["search"]
    assert out["link"]["match"].startswith("matched: ") and out["link"]["match"][-2:] != "0%"
    assert out["link"]["status"].startswith("CPU time:")
