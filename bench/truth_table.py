"""Headline GPU idle, its window and the top finding vs each H200 workload's own measurement.

Reads the ground-truth recordings in tests/fixtures/gpu/truth (recorded on the H200 by
tests/gpu/truth_run.sh: examples/gpu_truth.py and examples/gpu_shapes.py) and runs the same
analysis `kubeprof report` and the operator run (`kubeprof.analysis.findings.analyse`, whose
headline is `gpu_idle.headline`'s definition).

    .venv/bin/python bench/truth_table.py        # prints a Markdown table for BENCHMARKS.md
"""

from __future__ import annotations

import sys
from pathlib import Path

from kubeprof.analysis.cpu_samples import from_samples
from kubeprof.analysis.findings import Analysis, Window, analyse

TRUTH = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "gpu" / "truth"
sys.path.insert(0, str(TRUTH.parent))
import trace_io  # noqa: E402

MODES = (
    "compute",
    "half",
    "starved",
    "item",
    "tiny",
    "pageable",
    "pageable_pinned",
    "serve",
    "copyonly",
    "loader_starved",
    "loader_pageable",
    "loader_ok",
    # the same five shapes recorded again with off-CPU samples (py-spy sampled-wall)
    "offcpu/serve",
    "offcpu/copyonly",
    "offcpu/loader_starved",
    "offcpu/loader_pageable",
    "offcpu/loader_ok",
)


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _window(a: Analysis) -> str:
    ph = a.phases
    secs = f"{ph.steady.duration_ns / 1e9:.2f} s"
    if not ph.loop:
        return f"no steady loop: active window after warm-up, {secs}, {ph.steps} bursts"
    return f"steady state, {secs}, {ph.steps} steps"


def _top(a: Analysis) -> str:
    if a.verdict:
        return "no verdict (window too short)"
    loud = [f for f in a.findings if f.severity.value != "info"]
    if not loud:
        return "none above INFO"
    f = loud[0]
    gain = f" (gain {f.gain.saved_ns / 1e9:.2f} s, {100 * f.gain.share:.0f} %)" if f.gain else ""
    return f"{f.severity.value.upper()} {f.kind.value}{gain}"


def row(mode: str) -> str:
    t = trace_io.load_trace(TRUTH / f"{mode}.jsonl.gz")
    truth = t.meta["truth"]
    sm = t.meta.get("session_meta") or {}
    hz = float(sm.get("cpu_hz", 99) or 99)
    cpu = from_samples(t.samples, hz, sm.get("cpu_source", "py-spy")) if t.samples else None
    s0, s1 = t.meta["session_start_ns"], t.meta["session_end_ns"]
    a = analyse(t.activities, t.metrics, cpu, Window(s0, s1), offcpu=t.offcpu)
    h = a.headline
    diff = "–" if h.ratio is None else f"{100 * (h.ratio - truth['idle_ratio']):+.1f}"
    busy = f"{_pct(h.kernel_busy)} / {_pct(h.copy_busy)}"
    return (
        f"| {mode} | {_pct(truth['idle_ratio'])} ({truth.get('busy_includes', '?')}) | "
        f"{_pct(h.ratio)} | {diff} | {busy} | {_window(a)} | {_top(a)} |"
    )


def main() -> None:
    print(
        "| workload | its own idle (busy counts) | kubeprof headline | difference | "
        "kernel / copy busy | analysed window | top finding |"
    )
    print("| --- | ---: | ---: | ---: | ---: | --- | --- |")
    for mode in sys.argv[1:] or MODES:
        print(row(mode))


if __name__ == "__main__":
    main()
