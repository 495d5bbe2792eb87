"""Verdicts on the shapes off the training loop, against each workload's own measurement.

The H200 recordings in tests/fixtures/gpu/truth (``serve``, ``copyonly``, ``loader_*``,
recorded by tests/gpu/truth_run.sh around examples/gpu_shapes.py) replayed through the real
analysis: the top finding, the window it names and its severity, checked against the
``KUBEPROF_TRUTH`` line each workload printed (CUDA events and perf_counter accounting).
The recordings of 2026-12-04 hold no off-CPU samples (py-spy fallback, on-CPU only), so where
the launching thread blocked the analysis must say "off CPU, no stack"; a recording with
off-CPU samples must name the function it waited in instead.
"""

from __future__ import annotations

import pytest
import trace_io

from conftest import FIXTURES
from kubeprof.analysis import cpu_samples as cs
from kubeprof.analysis.findings import Analysis, Kind, Severity, Window, analyse

TRUTH = FIXTURES / "truth"
_CACHE: dict[str, tuple[dict, Analysis]] = {}
LOUD = (Severity.WARNING, Severity.CRITICAL)


def run(mode: str) -> tuple[dict, Analysis]:
    if mode not in _CACHE:
        path = TRUTH / f"{mode}.jsonl.gz"
        if not path.exists():
            pytest.skip(f"no {path.name}")
        tr = trace_io.load_trace(path)
        sm = tr.meta.get("session_meta") or {}
        hz = float(sm.get("cpu_hz", 99) or 99)
        src = sm.get("cpu_source", "")
        cpu = cs.from_samples(tr.samples, hz=hz, source=src) if tr.samples else None
        window = Window(tr.meta["session_start_ns"], tr.meta["session_end_ns"])
        a = analyse(tr.activities, tr.metrics, cpu, window, offcpu=tr.offcpu)
        _CACHE[mode] = ({**tr.meta["truth"], "offcpu": len(tr.offcpu)}, a)
    return _CACHE[mode]


def _ends(line: str, function: str) -> bool:
    return line.endswith(f" {function}")


def test_serve_is_waiting_for_work_over_its_active_window():
    truth, r = run("serve")
    top = r.findings[0]
    assert top.kind is Kind.WAITING_FOR_WORK and top.severity is Severity.CRITICAL
    # no steady loop: the window is the active one after warm-up, most of the serving loop
    assert not r.phases.loop and "no steady loop" in r.phases.method
    w = r.phases.steady
    assert truth["warmup_start_ns"] <= w.start_ns <= truth["main_start_ns"]
    assert abs(w.end_ns - truth["main_end_ns"]) < 50_000_000
    assert "active window after warm-up" in top.message and f"{w.duration_ns / 1e9:.2f} s" in (
        top.message
    )
    assert r.headline.ratio is not None
    assert abs(r.headline.ratio - truth["idle_ratio"]) < 0.05, (r.headline.ratio, truth)
    # blocked: where, from off-CPU stacks; without them it says so instead of naming code
    # from on-CPU samples
    if truth["offcpu"]:
        assert f"`{truth['host_functions']['waiting']} (" in top.message
    else:
        assert "off CPU, no stack" in top.message
    assert any(_ends(x, truth["host_functions"]["model"]) for x in top.evidence.lines)
    assert "CUDA graph" in top.message and "will not help" in top.message  # not the advice
    assert top.gain is not None and top.gain.share > 0.9
    found = {f.kind for f in r.findings}
    assert not found & {Kind.LAUNCH_BOUND, Kind.SYNC_STALL, Kind.GPU_STARVED, Kind.INPUT_STARVED}


def test_copy_only_loop_is_copy_bound_and_busy():
    truth, r = run("copyonly")
    h = r.headline
    assert h.ratio is not None and abs(h.ratio - truth["idle_ratio"]) < 0.05, h
    assert h.kernel_busy == 0 and h.copy_busy is not None and h.copy_busy > 0.9
    # the steady state is the copy loop (anchored on the copy), not the warm-up
    step = truth["wall_ms"] * 1e6 / truth["steps"]
    assert r.phases.steps >= truth["steps"] * 0.9
    assert abs(r.phases.steady.end_ns - truth["main_end_ns"]) < 2 * step
    top = r.findings[0]
    assert top.kind is Kind.COPY_BOUND and top.severity is Severity.CRITICAL
    assert "pageable" in top.message
    assert any(x.split(" ")[0].endswith(f":{truth['copy_line']}") for x in top.evidence.lines)
    assert top.evidence.numbers["HtoD_gbps"] == pytest.approx(truth["achieved_gb_s"], rel=0.1)
    found = {f.kind for f in r.findings}
    assert not found & {Kind.LAUNCH_BOUND, Kind.FUSION, Kind.SYNC_STALL, Kind.GPU_STARVED}


def test_starved_dataloader_names_the_wait_and_the_workers_function():
    truth, r = run("loader_starved")
    top = r.findings[0]
    assert top.kind is Kind.INPUT_STARVED and top.severity is Severity.CRITICAL
    fns = truth["host_functions"]
    assert any(_ends(x, fns["waiting"]) for x in top.evidence.lines)  # next(loader) site
    assert any(_ends(x, fns["worker"]) for x in top.evidence.lines)  # __getitem__'s work
    assert f"`{fns['worker']} (" in top.message and "num_workers" in top.message
    assert ("off CPU, no stack" in top.message) == (not truth["offcpu"])
    assert top.evidence.numbers["worker_processes"] == truth["workers"]
    assert "steady state" in top.message
    h = r.headline
    # the anchor steps every 4 batches (4 workers); truth counts in-step launch gaps busy
    assert h.ratio is not None and abs(h.ratio - truth["idle_ratio"]) < 0.06, h
    found = {f.kind for f in r.findings}
    assert Kind.GPU_STARVED not in found and Kind.WAITING_FOR_WORK not in found
    assert Kind.COPY_BOUND not in found  # pinned, 2 % of the loop


def test_pageable_dataloader_counts_copies_busy_and_names_both_causes():
    truth, r = run("loader_pageable")
    h = r.headline
    # copies keep the device busy: the headline is not "97 % idle"
    assert h.ratio is not None and abs(h.ratio - truth["idle_ratio"]) < 0.06, h
    assert h.copy_busy is not None
    assert h.copy_busy == pytest.approx(truth["copy_ms"] / truth["wall_ms"], abs=0.05)
    found = {f.kind: f for f in r.findings}
    assert r.findings[0].kind is Kind.INPUT_STARVED
    assert r.findings[0].severity is Severity.WARNING
    cb = found[Kind.COPY_BOUND]
    assert "pageable" in cb.message and cb.severity is Severity.WARNING
    assert cb.evidence.numbers["HtoD_gbps"] == pytest.approx(truth["achieved_gb_s"], rel=0.1)
    assert Kind.WAITING_FOR_WORK not in found and Kind.GPU_STARVED not in found


@pytest.mark.parametrize("mode", ["loader_ok", "compute"])
def test_healthy_loops_raise_no_warning(mode):
    truth, r = run(mode)
    assert r.headline.ratio is not None and r.headline.ratio < 0.05
    assert abs(r.headline.ratio - truth["idle_ratio"]) < 0.05
    assert not [f for f in r.findings if f.severity in LOUD], r.findings
    assert r.phases.loop and r.phases.steps >= 50


@pytest.mark.parametrize(
    "mode", ["serve", "copyonly", "loader_starved", "loader_pageable", "loader_ok"]
)
def test_every_finding_names_its_window_and_gains_something_when_loud(mode):
    _, r = run(mode)
    assert not r.verdict
    for f in r.findings:
        if f.severity in LOUD:
            assert f.gain is not None and f.gain.saved_ns >= 10_000_000 and f.gain.share >= 0.05
    for f in r.findings:
        if f.kind in (Kind.WAITING_FOR_WORK, Kind.INPUT_STARVED, Kind.COPY_BOUND):
            assert "steady state (" in f.message or "active window after warm-up (" in f.message


_RANK_SCRIPT = """
import sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from test_shapes_vs_truth import run
for mode in sys.argv[3:]:
    c = run(mode)[1].cpu_during_idle
    if c is not None:
        print(mode, [f.frame.label() for f in c.frames], [f.frame.label() for f in c.leaves],
              [[fr.label() for fr in s.stack] for s in c.stacks])
"""


def test_cpu_during_idle_ranks_the_same_whatever_the_hash_seed():
    # equal counts are ranked by name, not by set/dict order: one report, every run
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    modes = ["serve", "copyonly", "loader_starved", "offcpu/serve", "offcpu/loader_starved"]
    outs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        res = subprocess.run(
            [sys.executable, "-c", _RANK_SCRIPT, str(here), str(FIXTURES), *modes],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert res.stdout.count("\n") >= 3, res.stdout + res.stderr
        outs.add(res.stdout)
    assert len(outs) == 1
