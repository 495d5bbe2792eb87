"""The light agent's per-process GPU idle against each workload's own CUDA-event figure,
on NVML readings recorded on the H200 (tests/fixtures/gpu/light/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubeprof.agent.light.readings import DeviceReading, ProcessSample, RunningProcess
from kubeprof.agent.light.window import Owner, Window, attribute

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "light"
TRUTH = {m["mode"]: m for m in json.loads((FIX / "light_truth.json").read_text())["modes"]}
OWNER = Owner("team", "trainer-0", "main")


def _reading(line: str) -> tuple[float, DeviceReading]:
    r = json.loads(line)
    procs = [RunningProcess(p["pid"], p["mem_bytes"]) for p in r["procs"]]
    samples = [
        ProcessSample(p["pid"], int(r["ts_s"] * 1e6), round(p["sm_pct"]))
        for p in r["procs"]
        if p["sm_pct"] is not None  # NVML gave no sample: the process ran no kernel
    ]
    return r["ts_s"], DeviceReading(
        r["gpu"], "", round(r["gpu_util_pct"]), r["mem_used_bytes"], 0, procs, samples
    )


@pytest.mark.parametrize("mode", ["compute", "half", "starved", "tiny"])
def test_per_process_idle_is_within_5_points_of_the_workloads_own(mode):
    window = Window(3600.0)
    for line in (FIX / f"light_{mode}.jsonl").read_text().splitlines():
        ts, reading = _reading(line)
        window.add(ts, [attribute(reading, lambda _pid: OWNER)])
    (fig,) = window.pods()
    assert fig.idle_ratio is not None
    assert abs(fig.idle_ratio - TRUTH[mode]["truth_idle"]) <= 0.05, (mode, fig.idle_ratio)
