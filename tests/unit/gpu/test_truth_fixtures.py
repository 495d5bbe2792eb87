"""The H200 ground-truth recordings (tests/fixtures/gpu/truth): self-consistent, and their raw
wire captures re-run through the current receiver give the recorded kernels and stacks.

Headline-vs-truth assertions (kubeprof's idle figure against ``truth["idle_ratio"]``) belong
to the analysis tests; these check that the fixtures can be trusted as their input.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import trace_io

from kubeprof.agent.gpu.capture import replay
from kubeprof.model import FrameKind, GpuActivity

TRUTH = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "truth"
MODES = ["compute", "half", "starved", "tiny", "item", "pageable", "pageable_pinned"]
ALL = [*MODES, "train_torch", "train_torch_autograd"]
TRUTH_KEYS = {
    "mode",
    "steps",
    "warmup_steps",
    "wall_ms",
    "gpu_busy_ms",
    "idle_ratio",
    "kernels_per_step",
    "syncs_per_step",
    "bytes_copied_per_step",
    "host_functions",
    "main_start_ns",
    "main_end_ns",
    "busy_source",
    "busy_includes",
}


@cache
def _trace(name: str) -> trace_io.Trace:
    return trace_io.load_trace(TRUTH / f"{name}.jsonl.gz")


def _in_loop(t: trace_io.Trace, kind: str) -> list[GpuActivity]:
    m0, m1 = t.meta["truth"]["main_start_ns"], t.meta["truth"]["main_end_ns"]
    return [a for a in t.activities if a.kind == kind and m0 <= a.start_ns and a.end_ns <= m1]


def _caller(a: GpuActivity) -> tuple[str, int]:
    """Innermost frame of the workload's own file in a launch stack."""
    f = next(f for f in reversed(a.stack) if f.file.endswith(("gpu_truth.py", "train_torch.py")))
    return f.name, f.line


@pytest.mark.parametrize("name", ALL)
def test_fixture_is_small_and_recorded_with_the_pyspy_fallback(name):
    for ext in ("jsonl.gz", "kpgcap.gz"):
        assert (TRUTH / f"{name}.{ext}").stat().st_size < 1_500_000
    t = _trace(name)
    assert t.meta["session_meta"]["cpu_source"] == "py-spy"  # the H200 has no BPF
    assert t.meta["versions"]["cupti-python"] == "13.4.0"
    assert (TRUTH / f"{name}.report.txt").read_text().startswith(f"kubeprof report: {name}")
    assert t.samples and any(f.kind is FrameKind.PYTHON for s in t.samples for f in s.stack)
    assert all(a.end_ns >= a.start_ns for a in t.activities)


@pytest.mark.parametrize("mode", MODES)
def test_truth_line_is_present_and_fits_the_session(mode):
    t = _trace(mode)
    truth = t.meta["truth"]
    assert truth is not None and set(truth) >= TRUTH_KEYS
    assert truth["mode"] == mode.split("_")[0] and truth.get("pinned", False) == ("pinned" in mode)
    line = next(
        ln
        for ln in (TRUTH / f"{mode}.stdout.txt").read_text().splitlines()
        if ln.startswith("KUBEPROF_TRUTH ")
    )
    assert str(truth["main_start_ns"]) in line  # the stored truth is the printed one
    assert t.meta["session_start_ns"] < truth["warmup_start_ns"] < truth["main_start_ns"]
    assert truth["main_start_ns"] < truth["main_end_ns"] < t.meta["session_end_ns"]
    host_ms = (truth["main_end_ns"] - truth["main_start_ns"]) / 1e6
    assert truth["wall_ms"] == pytest.approx(host_ms, rel=0.02)  # CUDA events vs host clock
    assert 0 <= truth["gpu_busy_ms"] <= truth["wall_ms"]
    assert truth["idle_ratio"] == pytest.approx(
        1 - truth["gpu_busy_ms"] / truth["wall_ms"], abs=1e-3
    )


@pytest.mark.parametrize("mode", MODES)
def test_kernels_in_the_main_loop_are_the_steps_launches(mode):
    t = _trace(mode)
    truth = t.meta["truth"]
    kernels = _in_loop(t, "kernel")
    assert len(kernels) == truth["steps"] * truth["kernels_per_step"]
    assert all(k.stack and k.stack[0].kind is FrameKind.PYTHON for k in kernels)


@pytest.mark.parametrize("mode", ["item", "pageable", "pageable_pinned"])
def test_copies_and_syncs_name_the_line_that_made_them(mode):
    t = _trace(mode)
    truth = t.meta["truth"]
    steps = truth["steps"]
    copies = _in_loop(t, "memcpy")
    assert len(copies) == steps * truth["copies_per_step"]
    stream_syncs = [s for s in _in_loop(t, "sync") if s.name == "stream_sync"]
    assert len(stream_syncs) == steps * truth["syncs_per_step"]
    if mode == "item":  # .item(): a device->host copy (torch stages it in pinned memory)
        site = (truth["sync_function"], truth["sync_line"])
        assert {c.name for c in copies} == {"memcpy DtoH (pinned)"}
        assert all(c.bytes == truth["bytes_copied_per_step"] for c in copies)
    else:
        site = (truth["copy_function"], truth["copy_line"])
        kind = "pinned" if truth["pinned"] else "pageable"
        assert {c.name for c in copies} == {f"memcpy HtoD ({kind})"}
        assert all(c.bytes == truth["bytes_copied_per_step"] for c in copies)
    assert {_caller(c) for c in copies} == {site}
    assert {_caller(s) for s in stream_syncs} <= {site}
    assert all(s.stack[-1].name == "cudaStreamSynchronize" for s in stream_syncs)


@pytest.mark.parametrize("name", ALL)
def test_capture_replays_to_the_recorded_kernels_and_stacks(name):
    """CI re-runs the kernel<->stack join on the H200's raw inputs."""
    t = _trace(name)
    again = replay(TRUTH / f"{name}.kpgcap.gz")
    assert not [m for m in again.messages if "error" in m]

    def key(a: GpuActivity) -> tuple:
        return (a.kind, a.correlation_id, a.start_ns, a.end_ns, a.name, a.stack)

    assert any(a.kind == "kernel" for a in again.batch.gpu_activities)
    for kind in ("kernel", "memcpy", "memset", "nvtx"):
        recorded = sorted(key(a) for a in t.activities if a.kind == kind)
        replayed = sorted(key(a) for a in again.batch.gpu_activities if a.kind == kind)
        assert replayed == recorded, kind
    assert again.batch.counters["gpu_kernels"] == t.meta["counters"]["gpu_kernels"]


def test_replayed_event_syncs_get_their_enclosing_call():
    """The recording (older receiver) left cudaEventElapsedTime's event syncs without a
    stack; the current receiver's join gives them the Python line that waited."""
    recorded = [a for a in _trace("item").activities if a.name == "event_sync"]
    assert recorded and not any(a.stack for a in recorded)
    again = replay(TRUTH / "item.kpgcap.gz")
    syncs = [a for a in again.batch.gpu_activities if a.kind == "sync"]
    assert syncs and all(a.stack for a in syncs)
    events = [a for a in syncs if a.name == "event_sync"]
    assert {a.stack[-1].name for a in events} == {"cudaEventElapsedTime", "cudaDeviceSynchronize"}
    # Bursts.total_ms reads one event pair per step after the loop: two event syncs each
    in_total = [a for a in events if _caller(a)[0].startswith("Bursts.total_ms")]
    assert len(in_total) >= 0.99 * 2 * _trace("item").meta["truth"]["steps"]
