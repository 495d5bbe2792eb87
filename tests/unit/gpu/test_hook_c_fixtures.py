"""H200 recordings made with the C launch hook (tests/fixtures/gpu/truth/hook_c) replayed
through the receiver: the cheaper tracer attributes every kernel, to the same stacks as the
pure-Python tracer's recordings of the same workloads (tests/fixtures/gpu/truth).

``item`` and ``tiny`` were recorded with the final hook (C callbacks, whole-stack call-site
keys, activity records packed in C); ``train_torch`` with its first version (C callbacks,
records converted in Python), and is checked by test_attribution_truth.py as well.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
import trace_io

from kubeprof.agent.gpu.capture import DATA, read_capture, replay
from kubeprof.agent.gpu.wire import FrameDecoder
from kubeprof.analysis.gpu_attribution import attribution
from kubeprof.model import FrameKind, GpuActivity

TRUTH = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "truth"
HOOK = TRUTH / "hook_c"
MODES = ["item", "tiny"]


@cache
def _kernels(name: str) -> list[GpuActivity]:
    return [
        a for a in replay(HOOK / f"{name}.kpgcap.gz").batch.gpu_activities if a.kind == "kernel"
    ]


def _truth(name: str) -> dict:
    text = (HOOK / f"{name}.stdout.txt").read_text()
    return json.loads(text.split("KUBEPROF_TRUTH ", 1)[1].splitlines()[0])


def _stack(a: GpuActivity) -> tuple:
    return tuple((f.name, f.file.rsplit("/", 1)[-1], f.line, f.kind) for f in a.stack)


def _in_loop(acts: list[GpuActivity], truth: dict) -> list[GpuActivity]:
    m0, m1 = truth["main_start_ns"], truth["main_end_ns"]
    return [a for a in acts if m0 <= a.start_ns and a.end_ns <= m1]


@pytest.mark.parametrize("name", [*MODES, "train_torch"])
def test_recorded_with_the_c_hook(name):
    decoders: dict[int, FrameDecoder] = {}  # a frame may span chunks: one per connection
    hellos = [
        header
        for kind, conn, _ts, payload in read_capture(HOOK / f"{name}.kpgcap.gz")
        if kind == DATA
        for header, _records in decoders.setdefault(conn, FrameDecoder()).feed(payload)
        if header.get("t") == "hello"
    ]
    assert hellos and all(h["hook"] == "c" for h in hellos)
    assert (HOOK / f"{name}.kpgcap.gz").stat().st_size < 1_000_000


@pytest.mark.parametrize("name", MODES)
def test_every_kernel_has_its_python_stack(name):
    kernels = _kernels(name)
    assert len(kernels) > 10_000
    assert all(any(f.kind is FrameKind.PYTHON for f in k.stack) for k in kernels)
    att = attribution(kernels)
    assert att.attributed_ns == att.total_ns > 0


@pytest.mark.parametrize("name", MODES)
def test_main_loop_kernels_have_the_same_stacks_as_the_python_tracers_recording(name):
    truth = _truth(name)
    loop = _in_loop(_kernels(name), truth)
    assert len(loop) == truth["steps"] * truth["kernels_per_step"]
    old = trace_io.load_trace(TRUTH / f"{name}.jsonl.gz")
    old_loop = _in_loop([a for a in old.activities if a.kind == "kernel"], old.meta["truth"])
    assert old.meta["truth"]["steps"] == truth["steps"]
    assert Counter(_stack(k) for k in loop) == Counter(_stack(k) for k in old_loop)


def test_item_copies_and_syncs_name_the_line_that_waited():
    truth = _truth("item")
    acts = _in_loop(list(replay(HOOK / "item.kpgcap.gz").batch.gpu_activities), truth)
    copies = [a for a in acts if a.kind == "memcpy"]
    syncs = [a for a in acts if a.kind == "sync" and a.name == "stream_sync"]
    assert len(copies) == len(syncs) == truth["steps"]
    assert {c.name for c in copies} == {"memcpy DtoH (pinned)"}
    for a in copies + syncs:
        site = next(f for f in reversed(a.stack) if f.file.endswith("gpu_truth.py"))
        assert (site.name, site.line) == (truth["sync_function"], truth["sync_line"])
