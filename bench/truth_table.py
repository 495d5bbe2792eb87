"""Headline GPU idle vs each H200 workload's own CUDA-event measurement, and the findings.

Reads the ground-truth recordings in tests/fixtures/gpu/truth (recorded on the H200 by
tests/gpu/truth_run.sh) and runs the same analysis `kubeprof report` and the operator run.

    .venv/bin/python bench/truth_table.py        # prints a Markdown table for BENCHMARKS.md
"""

from __future__ import annotations

import sys
from pathlib import Path

from kubeprof.analysis import gpu_idle
from kubeprof.analysis.cpu_samples import from_samples
from kubeprof.analysis.findings import Window, analyse

TRUTH = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "gpu" / "truth"
sys.path.insert(0, str(TRUTH.parent))
import trace_io  # noqa: E402

MODES = ("compute", "half", "starved", "item", "tiny", "pageable", "pageable_pinned")


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def main() -> None:
    print("| workload | its own idle (CUDA events) | kubeprof headline (steady state) | "
          "difference | session window | findings |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for mode in MODES:
        t = trace_io.load_trace(TRUTH / f"{mode}.jsonl.gz")
        truth = t.meta["truth"]["idle_ratio"]
        s0, s1 = t.meta["session_start_ns"], t.meta["session_end_ns"]
        head = gpu_idle.headline(t.activities, t.metrics)
        hz = float(t.meta.get("session_meta", {}).get("hz", 99) or 99)
        cpu = from_samples(t.samples, hz, "py-spy") if t.samples else None
        a = analyse(t.activities, t.metrics, cpu, Window(s0, s1))
        session = gpu_idle.session(t.activities, s0, s1).idle_ratio
        ratio = head.ratio if head else None
        diff = "–" if ratio is None else f"{100 * (ratio - truth):+.1f}"
        kinds = ", ".join(f.kind.value for f in a.findings) or "none"
        print(f"| {mode} | {_pct(truth)} | {_pct(ratio)} | {diff} | {_pct(session)} | "
              f"{kinds} |")


if __name__ == "__main__":
    main()
