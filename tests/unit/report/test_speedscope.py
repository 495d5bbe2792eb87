from __future__ import annotations

import json

from kubeprof.report.speedscope import SCHEMA, render_speedscope

from .sample_profile import PERIOD


def test_document_structure_and_sums(profile):
    doc = json.loads(render_speedscope(profile))
    assert doc["$schema"] == SCHEMA
    assert doc["name"] == "unit-session (CPU time)"
    frames = doc["shared"]["frames"]
    assert all(isinstance(f["name"], str) for f in frames)
    names = [p["name"] for p in doc["profiles"]]
    assert names == [
        "python [10] / MainThread [10] (CPU time)",
        "python [10] / worker [11] (CPU time)",
        "sha256sum [20] / sha256sum [20] (CPU time)",
    ]
    for prof in doc["profiles"]:
        assert prof["type"] == "sampled"
        assert prof["unit"] == "nanoseconds"
        assert len(prof["samples"]) == len(prof["weights"])
        assert prof["startValue"] == 0
        assert prof["endValue"] == sum(prof["weights"])
        assert all(0 <= i < len(frames) for s in prof["samples"] for i in s)
    assert sum(p["endValue"] for p in doc["profiles"]) == 200 * PERIOD
    assert doc["activeProfileIndex"] == 0  # MainThread: 100 of 200 samples, the busiest


def test_frames_are_shared_and_root_first(profile):
    doc = json.loads(render_speedscope(profile))
    frames = doc["shared"]["frames"]
    keys = [json.dumps(f, sort_keys=True) for f in frames]
    assert len(keys) == len(set(keys))  # one entry per distinct frame
    hot = {"name": "hot", "file": "/srv/app.py", "line": 12}
    assert frames.count(hot) == 1  # used by two threads, stored once
    worker = doc["profiles"][1]
    assert [frames[i]["name"] for i in worker["samples"][0]] == ["worker_loop", "hot", "memcpy"]
    assert worker["weights"] == [60 * PERIOD]


def test_gpu_view_per_process(profile):
    doc = json.loads(render_speedscope(profile, view="gpu", group="process"))
    (prof,) = doc["profiles"]
    assert prof["name"] == "python [10] (GPU time)"
    assert prof["endValue"] == 4_000_000
    leaves = {doc["shared"]["frames"][s[-1]]["name"] for s in prof["samples"]}
    assert leaves == {"sgemm_[gpu]", "add_kernel_[gpu]"}
