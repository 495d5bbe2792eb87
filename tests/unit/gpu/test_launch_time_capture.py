"""Launch times on a real GPU, replayed in CI: ``examples/launch_times.py`` stamped each of
its steps with CLOCK_MONOTONIC before ``x @ x`` and after ``synchronize`` and printed them
with its thread id; the capture (tests/fixtures/gpu/truth/launch_time, recorded on an H100
under ``kubeprof record --gpu``) replayed through the current receiver must put every step's
launch inside the workload's own window, on its thread, before its kernel started, and the
Perfetto timeline must draw that launch there.
"""

from __future__ import annotations

import json
from pathlib import Path

from kubeprof.agent.gpu.capture import replay
from kubeprof.report.perfetto import gpu_events

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "truth" / "launch_time"


def _truth() -> dict:
    out = (FIXTURE / "launch_time.stdout.txt").read_text()
    line = next(x for x in out.splitlines() if x.startswith("KUBEPROF_TRUTH "))
    return json.loads(line.split(" ", 1)[1])


def _kernels() -> list:
    acts = replay(FIXTURE / "launch_time.kpgcap.gz").batch.gpu_activities
    return sorted((a for a in acts if a.kind == "kernel"), key=lambda a: a.start_ns)


def test_each_step_has_one_launch_inside_the_workloads_own_window_on_its_thread():
    truth, kernels = _truth(), _kernels()
    assert len(truth["steps"]) == 40 and all(k.launch_ns for k in kernels)
    for before, after in truth["steps"]:
        inside = [k for k in kernels if before <= k.launch_ns <= after]
        assert len(inside) == 1, (before, after, [k.launch_ns for k in inside])
        k = inside[0]
        assert k.launch_tid == truth["tid"]
        # the kernel ran after its launch and before the step's synchronize returned
        assert k.launch_ns <= k.start_ns <= k.end_ns <= after
        assert k.stack and k.stack[-1].kind.name == "CUDA_API"


def test_the_timeline_draws_each_launch_at_its_call_on_the_calling_thread():
    truth, kernels = _truth(), _kernels()
    t0 = min(k.launch_ns for k in kernels)
    events = list(gpu_events(kernels, t0))
    launches = {e["bind_id"]: e for e in events if e.get("cat") == "launch"}
    work = {e["bind_id"]: e for e in events if e.get("cat") == "kernel" and "bind_id" in e}
    assert launches.keys() == work.keys() and len(launches) == len(kernels)
    steps = [(b - t0) / 1e3 for b, _a in truth["steps"]]
    for flow, launch in launches.items():
        assert launch["tid"] == truth["tid"]
        assert launch["ts"] <= work[flow]["ts"]  # the arrow runs forward in time
    drawn = sorted(e["ts"] for e in launches.values())
    # every stamped step's launch is drawn within its step (µs, as the trace holds them)
    for (before, after), at in zip(truth["steps"], steps, strict=True):
        assert any(at <= ts <= (after - t0) / 1e3 for ts in drawn), before
