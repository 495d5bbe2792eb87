"""One GPU idle definition from NVML: the light agent's `kubeprof_gpu_idle_ratio` and a
report's NVML fallback for a pod (`kubeprof.analysis.pod_idle`) read the same H200 recording
(tests/fixtures/gpu/light) and give the same number.

The light side replays the recording through the agent's reader, `attribute` and `Window`.
The report side turns each reading into the metric rows the full agent's `NvmlSampler`
writes (its own `_processes` pass, over a pynvml stand-in that answers with the recorded
reading) and runs `pod_idle` on them, as `kubeprof report` and the operator do.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from kubeprof.agent.gpu.nvml import NvmlSampler
from kubeprof.agent.light.readings import DeviceReading, RecordedSource
from kubeprof.agent.light.window import Owner, Window, attribute
from kubeprof.analysis.pod_idle import pod_idle
from kubeprof.model import GpuMetricSample

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "light"
TRUTH = json.loads((FIX / "nvml_truth.json").read_text())
MODES = {m["mode"]: m for m in TRUTH["modes"]}
OWNER = Owner("team", "trainer-0", "main")


class _NotFound(Exception):
    pass


def _sampler_rows(reading: DeviceReading, ts: int) -> list[GpuMetricSample]:
    """The rows NvmlSampler._processes writes for this reading."""
    nv = types.SimpleNamespace(
        NVMLError=_NotFound,
        nvmlDeviceGetComputeRunningProcesses=lambda h: list(reading.processes),
    )

    def proc_util(h: object, since: int) -> list:
        new = [s for s in reading.samples if s.timeStamp > since]
        if not new:
            raise _NotFound("Not Found")
        return new

    nv.nvmlDeviceGetProcessUtilization = proc_util
    sampler = NvmlSampler()
    sampler._nvml = nv
    sampler._proc_seen = dict(_SEEN)
    rows = sampler._processes(reading.gpu, "h", ts)
    _SEEN.update(sampler._proc_seen)
    return rows


_SEEN: dict[int, int] = {}


@pytest.mark.parametrize("mode", ["compute", "half", "starved", "tiny"])
def test_light_agent_and_report_give_one_number(mode):
    truth = MODES[mode]
    path = FIX / f"nvml_{mode}.jsonl"
    stamps = [json.loads(ln)["t"] for ln in path.read_text().splitlines() if ln.strip()]
    source = RecordedSource(path)
    window = Window(3600.0)
    owner_of = lambda pid: OWNER if pid == truth["pid"] else None  # noqa: E731
    rows: list[GpuMetricSample] = []
    _SEEN.clear()
    for t in stamps:
        readings = source.read()
        window.add(t, [attribute(r, owner_of) for r in readings])
        for r in readings:
            rows += _sampler_rows(r, int(t * 1e9))
    light = window.pods()
    assert [f.owner for f in light] == [OWNER]
    users = {("node", m.device, m.pid) for m in rows if m.pid}
    report = pod_idle("uid", {("node", truth["pid"]): "uid"}, {}, {"node": rows}, users)
    assert report.source == "nvml" and report.ratio is not None
    assert light[0].idle_ratio is not None
    assert report.ratio == pytest.approx(light[0].idle_ratio, abs=1e-12)
    assert abs(report.ratio - truth["truth_idle"]) <= 0.06  # and it is the workload's figure
