"""The light agent's per-process GPU idle against each workload's own CUDA-event figure, on
NVML readings the landed `NvmlSource` recorded on the H200 (tests/fixtures/gpu/light/README.md),
replayed through the agent's `--replay` reader (`RecordedSource`), `attribute` and `Window`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubeprof.agent.light.readings import RecordedSource
from kubeprof.agent.light.window import Owner, Window, attribute

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "light"
TRUTH = json.loads((FIX / "nvml_truth.json").read_text())
MODES = {m["mode"]: m for m in TRUTH["modes"]}
OWNER = Owner("team", "trainer-0", "main")


def _idle(mode: str, loop_only: bool) -> tuple[float | None, int]:
    """Replay the recording through the agent's window; optionally only the polls whose
    period lies inside the workload's timed loop (what a 60 s window holds in steady state)."""
    truth = MODES[mode]
    path = FIX / f"nvml_{mode}.jsonl"
    stamps = [json.loads(ln)["t"] for ln in path.read_text().splitlines() if ln.strip()]
    source = RecordedSource(path)
    window = Window(3600.0)
    owner_of = lambda pid: OWNER if pid == truth["pid"] else None  # noqa: E731
    prev = None
    for ts in stamps:
        facts = [attribute(r, owner_of) for r in source.read()]
        inside = (
            prev is not None
            and prev >= truth["main_start_s"]
            and ts <= (truth["main_end_s"] + TRUTH["env"]["interval_s"] / 2)
        )
        if inside or not loop_only:
            window.add(ts, facts)
        prev = ts
    figs = window.pods()
    assert [f.owner for f in figs] == [OWNER]  # the workload's PID, nothing else
    return figs[0].idle_ratio, figs[0].polls


@pytest.mark.parametrize("mode", ["compute", "half", "starved", "tiny"])
def test_steady_state_idle_is_within_5_points_of_the_workloads_own(mode):
    idle, polls = _idle(mode, loop_only=True)
    assert idle is not None and polls >= 15, (mode, polls)
    assert abs(idle - MODES[mode]["truth_idle"]) <= 0.05, (mode, idle)
    assert idle == pytest.approx(MODES[mode]["agent_idle_loop"])  # what the H200 run saw


@pytest.mark.parametrize("mode", ["compute", "half", "starved", "tiny"])
def test_whole_process_idle_with_start_up_is_within_5_points(mode):
    # From the first poll that saw the process: CUDA start-up and warm-up (memory held, few
    # kernels) count as idle, which the workload's own loop timing leaves out.
    idle, _ = _idle(mode, loop_only=False)
    assert idle is not None and abs(idle - MODES[mode]["truth_idle"]) <= 0.05, (mode, idle)
    assert idle >= MODES[mode]["truth_idle"] - 0.01  # start-up only adds idle
