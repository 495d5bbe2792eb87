"""`kubeprof report -f perfetto` on a real H200 recording (truth/train_torch: CPU samples,
kernels, copies, memsets, syncs, NVTX), checked against the Trace Event Format's schema
and against the rules a viewer needs (slices nest per thread, every arrow has both ends),
and against the recording itself (every kernel where and when it ran, every CPU sample
under the stack it was taken in)."""

from __future__ import annotations

import gzip
import itertools
import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import jsonschema
import pytest

from kubeprof.analysis.interpreter_frames import fold_stack
from kubeprof.analysis.kernel_names import short_name
from kubeprof.model import Frame
from kubeprof.report.perfetto import GPU_PID, LAUNCH_TID, PHASES_PID

from .trace_schema import SCHEMA
from .truth_store import TRUTH, store_fixture, trace_io

KUBEPROF = str(Path(sys.executable).parent / "kubeprof")
MODE = "train_torch"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[dict, trace_io.Trace, Path]:
    d = tmp_path_factory.mktemp("perfetto")
    url = f"sqlite:///{d}/t.db"
    store_fixture(url, MODE)
    out = d / "t.trace.json.gz"
    run = subprocess.run(
        [KUBEPROF, "report", MODE, "-f", "perfetto", "--out", str(out), "--store", url],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    trace = json.loads(gzip.decompress(out.read_bytes()))
    return trace, trace_io.load_trace(TRUTH / f"{MODE}.jsonl.gz"), d


def test_it_is_a_valid_trace_event_file(recorded):
    trace, _, _ = recorded
    jsonschema.validate(trace, SCHEMA)
    broken = json.loads(json.dumps(trace))
    broken["traceEvents"][-1]["dur"] = "12"  # the check can fail
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)


def _slices(trace: dict) -> dict[tuple[int, int], list[dict]]:
    """Every track's slices: complete events as they are, begin/end pairs joined (an end
    must close the innermost open begin of its thread, by name, not before it)."""
    tracks: dict[tuple[int, int], list[dict]] = defaultdict(list)
    open_: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for i, e in enumerate(trace["traceEvents"]):
        track = (e["pid"], e.get("tid"))
        if e["ph"] == "X":
            tracks[track].append({**e, "order": i})
        elif e["ph"] == "B":
            open_[track].append({**e, "order": i})
        elif e["ph"] == "E":
            begin = open_[track].pop()
            assert begin["name"] == e["name"] and begin["ts"] <= e["ts"], (begin, e)
            tracks[track].append({**begin, "ph": "X", "dur": e["ts"] - begin["ts"], "end": e["ts"]})
    assert not any(open_.values()), "a begin without its end"
    return tracks


def _nesting(e: dict) -> tuple:
    """How a viewer orders slices: by start, longer first, then file order (a stable sort)."""
    return (e["ts"], -e["dur"], e["order"])


def test_slices_nest_on_every_track_and_every_arrow_has_two_ends(recorded):
    trace, _, _ = recorded
    arrows, async_slices = _assert_viewable(trace)
    assert arrows and async_slices


def _assert_viewable(trace: dict) -> tuple[int, int]:
    """Slices nest on every track, every arrow has two ends, every async slice ends, every
    process is named; (arrows, async slices) checked."""
    for track, events in _slices(trace).items():
        open_ends: list[float] = []
        for e in sorted(events, key=_nesting):
            while open_ends and open_ends[-1] <= e["ts"]:
                open_ends.pop()
            end = e.get("end", e["ts"] + e["dur"])  # B/E: the end event's own number
            assert not open_ends or end <= open_ends[-1], (track, e)  # as a viewer adds
            open_ends.append(end)
    ends: dict[str, Counter[str]] = defaultdict(Counter)
    for e in trace["traceEvents"]:
        if "bind_id" in e:
            ends[e["bind_id"]]["out" if e.get("flow_out") else "in"] += 1
    assert all(c == Counter({"out": 1, "in": 1}) for c in ends.values())
    begun: Counter[tuple] = Counter()
    for e in trace["traceEvents"]:
        if e["ph"] in "be":
            begun[(e["pid"], e["cat"], e["id"])] += 1 if e["ph"] == "b" else -1
    assert set(begun.values()) <= {0}
    named = {e["pid"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert {e["pid"] for e in trace["traceEvents"] if e["ph"] != "M"} <= named
    return len(ends), len(begun)


def test_device_work_is_where_and_when_it_ran(recorded):
    trace, truth, _ = recorded
    t0 = truth.meta["session_start_ns"]
    got = sorted(
        (e["pid"] - GPU_PID, e["tid"], e["cat"], round(e["ts"], 1), round(e["dur"], 1), e["name"])
        for e in trace["traceEvents"]
        if e["ph"] == "X" and e["cat"] in ("kernel", "memcpy", "memset")
    )
    want = sorted(
        (
            a.device,
            a.stream,
            a.kind,
            round((a.start_ns - t0) / 1e3, 1),
            round((a.end_ns - a.start_ns) / 1e3, 1),
            short_name(a.demangled or a.name) if a.kind == "kernel" else a.name,
        )
        for a in truth.activities
        if a.kind in ("kernel", "memcpy", "memset")
    )
    assert got == want and len(got) == 7298
    kinds = Counter(e["cat"] for e in trace["traceEvents"] if e["ph"] == "b")
    assert kinds == Counter(a.kind for a in truth.activities if a.kind in ("nvtx", "sync"))
    launches = [e for e in trace["traceEvents"] if e.get("cat") == "launch"]
    assert all(e["tid"] == LAUNCH_TID for e in launches)
    assert any("train_torch.py" in e["args"]["launched_at"] for e in launches)


def test_cpu_slices_hold_each_sample_under_its_own_stack(recorded):
    trace, truth, _ = recorded
    t0 = truth.meta["session_start_ns"]
    tracks = _slices(trace)
    checked = 0
    for s in truth.samples[::7]:
        ts = (s.ts_ns - t0) / 1e3
        under = sorted(
            (
                e
                for e in tracks[(s.pid, s.tid)]
                if e["ts"] <= ts + 0.0015 and ts < e["ts"] + e["dur"] - 0.0015
            ),
            key=_nesting,
        )
        want = [Frame(f.name, f.kind, f.file).label() for f in fold_stack(s.stack)]
        assert [e["name"] for e in under] == want, s
        checked += 1
    assert checked > 100


def test_phases_cover_the_session_in_order(recorded):
    trace, truth, _ = recorded
    phases = [e for e in trace["traceEvents"] if e.get("cat") == "phase"]
    assert [p["name"] for p in phases] == ["start-up", "warm-up", "steady state", "tail"]
    assert all(p["pid"] == PHASES_PID for p in phases)
    for a, b in itertools.pairwise(phases):
        assert abs(a["ts"] + a["dur"] - b["ts"]) < 0.01
    span = (truth.meta["session_end_ns"] - truth.meta["session_start_ns"]) / 1e3
    assert phases[0]["ts"] == 0 and abs(phases[-1]["ts"] + phases[-1]["dur"] - span) < 0.01
    assert phases[2]["args"]["steps"] > 0


def test_out_dash_writes_the_trace_to_stdout(recorded):
    _, _, d = recorded
    run = subprocess.run(
        [
            KUBEPROF,
            "report",
            MODE,
            "-f",
            "perfetto",
            "--out",
            "-",
            "--store",
            f"sqlite:///{d}/t.db",
        ],
        capture_output=True,
        timeout=300,
    )
    assert run.returncode == 0
    assert json.loads(run.stdout)["otherData"]["session"] == MODE


def _perfetto_of(session: str, url: str) -> dict:
    """`kubeprof report SESSION -f perfetto --out -`, checked against the format's schema."""
    run = subprocess.run(
        [KUBEPROF, "report", session, "-f", "perfetto", "--out", "-", "--store", url],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    trace = json.loads(run.stdout)
    jsonschema.validate(trace, SCHEMA)
    return trace


def test_off_cpu_waits_sit_beside_the_samples_of_their_thread(tmp_path):
    """A thread that computes, waits 25 ms in a read, computes again: its samples on its
    own track, the wait on the track beside it, where and as long as it was."""
    from kubeprof.model import Batch, CpuSample, FrameKind, OffCpuSample, ProcessInfo
    from kubeprof.report.perfetto import OFFCPU_TID
    from kubeprof.storage import Store

    url = f"sqlite:///{tmp_path}/w.db"
    main = Frame("main", FrameKind.PYTHON, "/app/w.py", 3)
    work = (main, Frame("crunch", FrameKind.PYTHON, "/app/w.py", 9))
    wait = (main, Frame("fetch", FrameKind.PYTHON, "/app/w.py", 20))
    t0, period = 1_000_000_000, 10_101_010
    on = [t0 + i * period for i in range(5)] + [t0 + 80_000_000 + i * period for i in range(5)]
    store = Store.open(url)
    sid = store.create_session("w", command="python w.py", start_ns=t0, hz=99)
    store.write_batch(
        sid,
        Batch(
            samples=tuple(CpuSample(ts, 7, 7, "py", 0, work) for ts in on),
            processes=(ProcessInfo(7, 1, "python", "python w.py"),),
            offcpu_samples=(
                OffCpuSample(
                    t0 + 51_000_000, 7, 7, "py", 25_000_000, 25_000_000, "read", "bpf-sched", wait
                ),
            ),
        ),
    )
    store.finish_session(sid, end_ns=t0 + 200_000_000)
    store.close()
    trace = _perfetto_of("w", url)
    waits = [e for e in trace["traceEvents"] if e.get("cat") == "off-cpu"]
    assert len(waits) == 1
    w = waits[0]
    assert (w["pid"], w["tid"], w["name"]) == (7, OFFCPU_TID | 7, "off-CPU: read")
    assert (w["ts"], w["dur"]) == (51_000.0, 25_000.0)
    assert w["args"]["waited_in"] == "fetch (w.py:20)"
    crunch = [
        e for e in trace["traceEvents"] if e.get("name") == "crunch (w.py)" and e["ph"] == "B"
    ]
    assert [(e["tid"], e["ts"]) for e in crunch] == [(7, 0.0), (7, 80_000.0)]  # two runs
    names = {
        (e["pid"], e.get("tid")): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["name"] == "thread_name"
    }
    assert names[(7, OFFCPU_TID | 7)] == "py [7] off-CPU"


def test_a_slice_never_ends_after_its_end_in_a_viewers_float_sum():
    """ts + dur as JavaScript adds them stays at or before the end, late in a long session
    too (where one float step is ~0.1 ns), and dur stays within 1 ns of the truth."""
    import random

    from kubeprof.report.perfetto import _dur, _us

    rng = random.Random(31)
    for _ in range(20_000):
        start = rng.randrange(0, 10**15)  # up to ~11.6 days after the session start
        end = start + rng.randrange(0, 10**8)
        dur = _dur(start, end, 0)
        ts, stop = _us(start, 0), _us(end, 0)
        assert dur >= 0 and ts + dur <= stop and abs(dur - (stop - ts)) <= 1e-3


def test_launch_arrows_start_on_the_calling_thread_when_it_called(tmp_path):
    """Kernels whose launch time and thread were recorded (wire version 2): the launch is
    an instant on that thread's own track (beside its CPU samples), at the call, and the
    arrow runs from it to the kernel. A record without a launch time (every fixture from
    before) keeps the "CUDA launches" track at its kernel's start, which says so."""
    from kubeprof.model import Batch, CpuSample, FrameKind, GpuActivity, ProcessInfo
    from kubeprof.storage import Store

    url = f"sqlite:///{tmp_path}/l.db"
    main = Frame("main", FrameKind.PYTHON, "/app/l.py", 3)
    step = (main, Frame("step", FrameKind.PYTHON, "/app/l.py", 9))
    launch = (*step, Frame("cudaLaunchKernel", FrameKind.CUDA_API))
    t0, ms = 1_000_000_000, 1_000_000

    def kernel(corr: int, start_ms: int, **launched: int) -> GpuActivity:
        at = t0 + start_ms * ms
        return GpuActivity(
            "kernel", "_Z4gemmv", at, at + ms, 0, 7, corr, 3, stack=launch, **launched
        )

    acts = (
        kernel(1, 5, launch_ns=t0 + 2 * ms, launch_tid=7),  # the sampled main thread
        kernel(2, 7, launch_ns=t0 + 4 * ms + 500, launch_tid=8),  # a thread never sampled
        kernel(3, 9),  # an old tracer's record: no launch time
        kernel(4, 11, launch_ns=t0 + 10 * ms),  # time, but no thread
    )
    store = Store.open(url)
    sid = store.create_session("l", command="python l.py", start_ns=t0, hz=99)
    samples = tuple(CpuSample(t0 + i * ms, 7, 7, "py", 0, step) for i in range(12))
    store.write_batch(
        sid,
        Batch(samples=samples, processes=(ProcessInfo(7, 1, "python", "python l.py"),)),
    )
    store.write_batch(sid, Batch(gpu_activities=acts))
    store.finish_session(sid, end_ns=t0 + 20 * ms)
    store.close()
    trace = _perfetto_of("l", url)
    assert _assert_viewable(trace) == (4, 0)
    by_flow: dict[str, dict[str, dict]] = defaultdict(dict)
    for e in trace["traceEvents"]:
        if "bind_id" in e:
            by_flow[e["bind_id"]]["out" if e.get("flow_out") else "in"] = e
    arrows = {
        ends["in"]["args"]["correlation_id"]: (
            (ends["out"]["pid"], ends["out"]["tid"], ends["out"]["ts"]),
            (ends["in"]["pid"], ends["in"]["tid"], ends["in"]["ts"]),
        )
        for ends in by_flow.values()
    }
    gpu = GPU_PID
    assert arrows == {
        1: ((7, 7, 2_000.0), (gpu, 3, 5_000.0)),
        2: ((7, 8, 4_000.5), (gpu, 3, 7_000.0)),
        3: ((7, LAUNCH_TID, 9_000.0), (gpu, 3, 9_000.0)),
        4: ((7, LAUNCH_TID, 10_000.0), (gpu, 3, 11_000.0)),
    }
    first = by_flow[next(iter(by_flow))]["out"]
    assert (first["name"], first["args"]["queued_us"]) == ("cudaLaunchKernel", 3_000.0)
    names = {
        (e["pid"], e.get("tid")): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["name"] == "thread_name"
    }
    assert names[(7, 7)] == "py [7]"  # the launches sit on the sampled thread's own track
    assert names[(7, LAUNCH_TID)] == (
        "CUDA launches (calling thread not recorded; drawn at kernel start: call time not recorded)"
    )


def test_a_graph_replay_has_one_launch_and_one_arrow(tmp_path):
    """A CUDA graph's replay queues several kernels under one launch's correlation id: one
    launch slice, one arrow (to the first kernel), the others saying why they have none; a
    second process reusing the same correlation id gets its own arrow."""
    from kubeprof.model import Batch, FrameKind, GpuActivity
    from kubeprof.storage import Store

    url = f"sqlite:///{tmp_path}/g.db"
    launch = (
        Frame("main", FrameKind.PYTHON, "/app/g.py", 3),
        Frame("cudaGraphLaunch", FrameKind.CUDA_API),
    )
    t0, ms = 1_000_000_000, 1_000_000

    def kernel(pid: int, corr: int, start_ms: int) -> GpuActivity:
        at = t0 + start_ms * ms
        return GpuActivity("kernel", "_Z1kv", at, at + ms, 0, pid, corr, 3, stack=launch)

    acts = (kernel(7, 1, 2), kernel(7, 1, 4), kernel(7, 1, 6), kernel(7, 2, 8), kernel(9, 1, 10))
    store = Store.open(url)
    sid = store.create_session("g", command="python g.py", start_ns=t0, hz=99)
    store.write_batch(sid, Batch(gpu_activities=acts))
    store.finish_session(sid, end_ns=t0 + 20 * ms)
    store.close()
    trace = _perfetto_of("g", url)
    assert _assert_viewable(trace)[0] == 3  # arrows: graph of pid 7, its next launch, pid 9
    events = trace["traceEvents"]
    launches = [e for e in events if e.get("cat") == "launch"]
    assert sorted((e["pid"], e["args"]["correlation_id"]) for e in launches) == [
        (7, 1),
        (7, 2),
        (9, 1),
    ]
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    assert [("bind_id" in e, "launch" in e["args"]) for e in kernels] == [
        (True, False),
        (False, True),
        (False, True),
        (True, False),
        (True, False),
    ]
