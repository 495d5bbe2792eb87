"""Each pod's GPU idle from its own records (kubeprof.analysis.pod_idle), over real H200 data.

Pods are assembled from real recordings: the ground-truth kernel traces (tests/fixtures/gpu/
truth, each workload's own CUDA-event idle in its meta) for pods whose tracer was on, and the
per-process NVML readings (tests/fixtures/gpu/light, with each workload's own idle) for pods
without one. Two traced pods on one GPU must each get their own figure, a pod without kernels
the NVML one labelled ``nvml``, and a pod without either no figure but a reason.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import pytest

from kubeprof import model
from kubeprof.analysis import gpu_idle
from kubeprof.analysis.pod_idle import PROC_SM_METRIC, pod_idle, pods_idle
from kubeprof.model import Batch, GpuActivity, GpuMetricSample, ProcessInfo
from kubeprof.operator import aggregate, metrics
from kubeprof.operator.db import BatchWriter, ensure_session
from kubeprof.storage import Store
from kubeprof.storage import queries as q
from tests.fixtures.gpu import trace_io

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "gpu"
NODE = "n1"


@cache
def traced(mode: str, pid: int) -> tuple[list[GpuActivity], float]:
    """A truth recording's activities, moved to `pid`, and the workload's own idle."""
    meta, acts, _ = trace_io.load(FIX / "truth" / f"{mode}.jsonl.gz")
    return [replace(a, pid=pid) for a in acts], meta["truth"]["idle_ratio"]


@cache
def nvml_readings(mode: str, pid: int) -> tuple[list[GpuMetricSample], float]:
    """A light-agent recording's NVML readings as the agent's collector ships them (device
    utilisation, per-process SM utilisation) for `pid`, and the workload's own idle."""
    out = []
    for line in (FIX / "light" / f"nvml_{mode}.jsonl").read_text().splitlines():
        r = json.loads(line)
        ts = int(r["t"] * 1e9)
        for d in r["devices"]:
            if not d["processes"]:
                continue  # before the workload's process held the GPU, or after it left
            out.append(GpuMetricSample(ts, d["gpu"], gpu_idle.UTIL_METRIC, d["util_gpu"]))
            sm = [x["smUtil"] for x in d["samples"]]  # NVML's samples since the last poll
            if sm:
                out.append(
                    GpuMetricSample(ts, d["gpu"], PROC_SM_METRIC, sum(sm) / len(sm), pid=pid)
                )
    truth = json.loads((FIX / "light" / "nvml_truth.json").read_text())
    return out, next(m["truth_idle"] for m in truth["modes"] if m["mode"] == mode)


def test_two_traced_pods_on_one_gpu_each_get_their_own_idle() -> None:
    half, half_truth = traced("half", 101)
    starved, starved_truth = traced("starved", 202)
    pid_pods = {(NODE, 101): "pod-a", (NODE, 202): "pod-b"}
    acts = {NODE: half + starved}
    users = {(NODE, 0, 101), (NODE, 0, 202)}
    a = pod_idle("pod-a", pid_pods, acts, {}, users)
    b = pod_idle("pod-b", pid_pods, acts, {}, users)
    assert (a.source, b.source) == ("cupti", "cupti")
    # each figure is the headline of that pod's kernels alone, not the shared device's
    assert a.ratio == pytest.approx(gpu_idle.headline(half).ratio)
    assert b.ratio == pytest.approx(gpu_idle.headline(starved).ratio)
    assert abs(a.ratio - half_truth) < 0.05 and abs(b.ratio - starved_truth) < 0.05
    assert a.kernels == sum(1 for x in half if x.kind == "kernel")


def test_pod_without_tracer_falls_back_to_its_processes_nvml_readings() -> None:
    readings, truth = nvml_readings("half", 303)
    traced_acts, _ = traced("compute", 101)
    pid_pods = {(NODE, 101): "traced", (NODE, 303): "plain"}
    users = {(NODE, 0, 101), (NODE, 0, 303)}
    fig = pod_idle("plain", pid_pods, {NODE: traced_acts}, {NODE: readings}, users)
    assert fig.source == "nvml" and "per-process" in fig.detail
    assert fig.ratio is not None and abs(fig.ratio - truth) < 0.05
    # the traced pod beside it keeps its CUPTI figure (the NVML rows are not its own)
    assert (
        pod_idle("traced", pid_pods, {NODE: traced_acts}, {NODE: readings}, users).source == "cupti"
    )


def test_device_utilisation_stands_in_only_for_a_gpu_the_pod_used_alone() -> None:
    readings, truth = nvml_readings("starved", 303)
    device_only = [m for m in readings if m.pid == 0]
    alone = pod_idle("plain", {(NODE, 303): "plain"}, {}, {NODE: device_only}, {(NODE, 0, 303)})
    assert alone.source == "nvml" and alone.ratio is not None and "device" in alone.detail
    assert abs(alone.ratio - truth) < 0.05
    shared = pod_idle(
        "plain",
        {(NODE, 303): "plain", (NODE, 404): "other"},
        {},
        {NODE: device_only},
        {(NODE, 0, 303), (NODE, 0, 404)},
    )
    assert shared.ratio is None and shared.source == ""
    assert "shared with other processes" in shared.missing


@pytest.mark.parametrize(
    ("pid_pods", "users", "missing"),
    [
        ({}, set(), "no process of this pod was found"),
        ({(NODE, 7): "p"}, set(), "NVML saw none of its processes on a GPU"),
        ({(NODE, 7): "p"}, {(NODE, 0, 7)}, "no NVML utilisation reading of its GPU"),
    ],
)
def test_no_data_no_figure_and_the_reason(pid_pods, users, missing) -> None:
    fig = pod_idle("p", pid_pods, {}, {}, users)
    assert fig.ratio is None and fig.source == "" and missing in fig.missing


def test_aggregation_status_and_metrics_label_each_pods_source(tmp_path: Path) -> None:
    """Through the store: status and /metrics carry each pod's own figure and its source;
    a pod without data is said to be so in status and has no metric sample."""
    store = Store.open(f"sqlite:///{tmp_path}/k.db")
    sid = ensure_session(
        store.engine, "ml", "s", "uid-s", hz=99, started_at=datetime.now(UTC), meta={}
    )
    half, half_truth = traced("half", 101)
    starved, starved_truth = traced("starved", 202)
    readings, plain_truth = nvml_readings("half", 303)
    procs = tuple(
        ProcessInfo(pid, 1, "python", "python", "c", uid)
        for pid, uid in ((101, "pod-a"), (202, "pod-b"), (303, "pod-c"), (404, "pod-d"))
    )
    BatchWriter(store.engine).store(
        sid,
        "b1",
        NODE,
        Batch(processes=procs, gpu_activities=tuple(half + starved), gpu_metrics=tuple(readings)),
    )
    with store.engine.begin() as conn:
        s = aggregate.aggregate(conn, sid)
    assert s.pods["pod-a"].gpu_idle_source == "cupti"
    assert abs(s.pods["pod-a"].gpu_idle - half_truth) < 0.05
    assert abs(s.pods["pod-b"].gpu_idle - starved_truth) < 0.05
    assert s.pods["pod-c"].gpu_idle_source == "nvml"
    assert abs(s.pods["pod-c"].gpu_idle - plain_truth) < 0.05
    assert s.pods["pod-d"].gpu_idle is None and s.pods["pod-d"].gpu_idle_missing
    names = {u: f"ml/{u}" for u in ("pod-a", "pod-b", "pod-c", "pod-d")}
    status = aggregate.status_summary(s, names)
    pods = {p["name"]: p for p in status["summary"]["pods"]}
    assert pods["ml/pod-a"]["gpuIdleSource"] == "cupti"
    assert pods["ml/pod-c"]["gpuIdleSource"] == "nvml"
    assert pods["ml/pod-d"]["gpuIdle"] == "" and "gpuIdleSource" not in pods["ml/pod-d"]
    assert "NVML saw none of its processes" in pods["ml/pod-d"]["gpuIdleMissing"]
    metrics.publish_gpu_idle("ml", "s", s, names)
    text = metrics.render().decode()
    assert (
        'kubeprof_pod_gpu_idle_ratio{namespace="ml",pod="pod-a",session="s",'
        'session_namespace="ml",source="cupti"}' in text
    )
    assert 'pod="pod-c",session="s",session_namespace="ml",source="nvml"}' in text
    assert 'pod="pod-d"' not in text.split("kubeprof_pod_gpu_idle_ratio", 1)[1]
    metrics.forget_session("ml", "s")
    with store.engine.begin() as conn:
        aggregate.store(conn, sid, s)


def test_all_pods_at_once_give_each_pods_own_figure_and_top_stack(tmp_path: Path) -> None:
    """Aggregation reads the records once for all pods (16,000 pods cost 83.5 s when each
    pod scanned every record): each pod's figure and top stack are still what that pod
    alone gives, including a shared GPU, NVML-only pods, pods without data and ties."""
    half, _ = traced("half", 101)
    starved, _ = traced("starved", 202)
    readings, _ = nvml_readings("half", 303)
    device_only = [replace(m, device=1) for m in nvml_readings("starved", 0)[0] if m.pid == 0]
    pid_pods = {(NODE, 101): "a", (NODE, 202): "b", (NODE, 303): "c", (NODE, 404): "d"}
    pid_pods |= {(NODE, 505): "e", ("n2", 505): "e", (NODE, 606): "f", (NODE, 707): "g"}
    acts = {NODE: half + starved}
    metrics_ = {NODE: readings + device_only}
    users = {(NODE, 0, 101), (NODE, 0, 202), (NODE, 0, 303), (NODE, 1, 404)}
    users |= {(NODE, 2, 606), (NODE, 2, 999), (NODE, 3, 707)}
    pods = ["a", "b", "c", "d", "e", "f", "g", "absent"]
    together = pods_idle(pid_pods, acts, metrics_, users, pods)
    alone = {uid: pod_idle(uid, pid_pods, acts, metrics_, users) for uid in pods}
    assert together == alone
    assert {u: f.source for u, f in together.items()} == {
        "a": "cupti",
        "b": "cupti",
        "c": "nvml",
        "d": "nvml",
        "e": "",
        "f": "",
        "g": "",
        "absent": "",
    }
    assert "shared with other processes" in together["f"].missing

    store = Store.open(f"sqlite:///{tmp_path}/k.db")
    sid = ensure_session(
        store.engine, "ml", "s", "uid-s", hz=99, started_at=datetime.now(UTC), meta={}
    )
    frames = [model.Frame(f"f{i}", model.FrameKind.PYTHON, "/m.py", i) for i in range(4)]
    # pod "a": two stacks tied at 3 samples; "b": a clear top; pid 9 belongs to no pod
    per_pid = {101: [0, 0, 0, 1, 1, 1], 102: [2], 202: [3, 3, 1], 9: [2, 2, 2, 2]}
    samples = tuple(
        model.CpuSample(i, pid, pid, "python", 0, (frames[k],))
        for pid, ks in per_pid.items()
        for i, k in enumerate(ks)
    )
    procs = tuple(
        ProcessInfo(pid, 1, "python", "python", "c", uid)
        for pid, uid in ((101, "a"), (102, "a"), (202, "b"), (9, ""))
    )
    BatchWriter(store.engine).store(sid, "b1", NODE, Batch(samples=samples, processes=procs))
    with store.engine.begin() as conn:
        tops = q.top_stack_per_pod(conn, sid)
        pod_of = {(NODE, 101): "a", (NODE, 102): "a", (NODE, 202): "b"}
        one_by_one = {
            uid: q.top_stacks(conn, sid, 1, pids=[k for k, u in pod_of.items() if u == uid])[0]
            for uid in ("a", "b")
        }
    assert tops == one_by_one
    assert tops["b"] == ((frames[3],), 2)
