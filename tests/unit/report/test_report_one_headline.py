"""One analysis pass per report: the text report states the headline once, with one timeline
strip, and the GPU section and the JSON agree with the analysis' figure."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kubeprof.model import GpuActivity
from kubeprof.report.formats import render
from kubeprof.reportdata import Profile
from kubeprof.reporting import build_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
from synth import MS, Loop


def _report():
    loop = Loop(steps=60, kernels=4, kernel_ns=1 * MS, host_ns=4 * MS).build()
    acts = list(loop.acts)
    for a in loop.acts[-60:]:  # a copy after some kernels: copy-busy shown beside kernels
        acts.append(
            GpuActivity(
                "memcpy",
                "memcpy HtoD (pinned)",
                a.end_ns,
                a.end_ns + MS // 2,
                0,
                a.pid,
                0,
                bytes=1 << 20,
            )
        )
    s0, s1 = loop.session
    return build_report(Profile("t", 99, (s1 - s0) / 1e9), acts, [], s0, s1)


def test_text_states_the_headline_once_with_one_strip():
    report = _report()
    a, gpu = report.analysis, report.gpu
    assert a is not None and gpu is not None and gpu.headline is not None
    h = a.headline
    assert gpu.headline is h  # one IdleFigure: the GPU section reads the analysis' own figure
    text = render(report, "text")
    assert isinstance(text, str)
    figure = f"{100 * h.ratio:.1f} %"
    assert text.count(f"GPU idle {figure} of the steady state") == 1
    assert f"steady state {figure}" not in text  # the GPU section no longer repeats it
    strips = [ln for ln in text.splitlines() if ln.startswith("  |") and ln.endswith("|")]
    assert len(strips) == 2  # the analysis timeline: busy bars and phase marks
    assert f"kernels {100 * h.kernel_busy:.1f} %, copies {100 * h.copy_busy:.1f} %" in text
    doc = json.loads(render(report, "json"))
    assert doc["headline"]["idle_ratio"] == h.ratio
    assert doc["headline"]["copy_busy"] == h.copy_busy > 0
    assert doc["headline"]["window_kind"] == "steady_state"
