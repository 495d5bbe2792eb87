"""Pageable vs pinned copies, Python stacks on host syncs, and raw captures replayed."""

from __future__ import annotations

import gzip
import types

import pytest
from fake_cupti import FakeCupti

from kubeprof.agent.gpu import capture as capture_mod
from kubeprof.agent.gpu.capture import CaptureError, read_capture, replay
from kubeprof.agent.gpu.join import memcpy_name
from kubeprof.agent.gpu.receiver import GpuReceiver
from kubeprof.agent.gpu.tracer import CuptiTracer, TracerConfig
from kubeprof.agent.gpu.wire import Sender
from kubeprof.model import FrameKind, GpuActivity

KINDS = ("kernel", "memcpy", "sync")


def _trace(tmp_path, play, *, capture: str | None = None) -> tuple[list[GpuActivity], object]:
    """Run ``play`` under the tracer; the receiver's activities (and the receiver)."""
    path = str(tmp_path / "gpu.sock")
    rx = GpuReceiver(path, capture_path=capture)
    rx.start()
    tx = Sender(path, interval_s=0.02)
    tr = CuptiTracer(tx, TracerConfig(kinds=KINDS))
    tr.start()
    tx.start()
    play()
    tr.stop()
    return list(rx.stop(2.0).gpu_activities), rx


def _caller(act: GpuActivity) -> str:
    """The innermost Python frame of a launch stack outside the fake library."""
    frames = [f for f in act.stack if f.kind is FrameKind.PYTHON]
    return next(f.name for f in reversed(frames) if not f.file.endswith("fake_cupti.py"))


def test_memcpy_name_says_pageable_or_pinned():
    assert memcpy_name(1, 1, 3) == "memcpy HtoD (pageable)"
    assert memcpy_name(1, 2, 3) == "memcpy HtoD (pinned)"
    assert memcpy_name(2, 3, 1) == "memcpy DtoH (pageable)"
    assert memcpy_name(8, 3, 3) == "memcpy DtoD"
    assert memcpy_name(1, 0, 0) == "memcpy HtoD"  # kinds unknown: no guess


def test_copies_carry_host_memory_kind_and_their_stack(fake, tmp_path):
    def load_pageable():
        fake.memcpy(src_kind=1)

    def load_pinned():
        fake.memcpy(src_kind=2)

    def play():
        load_pageable()
        load_pinned()

    acts, _ = _trace(tmp_path, play)
    copies = {a.name: a for a in acts if a.kind == "memcpy"}
    assert set(copies) == {"memcpy HtoD (pageable)", "memcpy HtoD (pinned)"}
    assert copies["memcpy HtoD (pageable)"].bytes == 1 << 20
    assert _caller(copies["memcpy HtoD (pageable)"]).endswith("load_pageable")
    assert _caller(copies["memcpy HtoD (pinned)"]).endswith("load_pinned")


@pytest.mark.parametrize("record_id", ["runtime", "driver", "inner"])
def test_sync_records_carry_the_python_line_that_waited(fake, tmp_path, record_id):
    def loss_item():  # what `.item()` does: a copy, then a stream sync
        fake.launch()
        fake.memcpy(src_kind=3, dst_kind=1)
        fake.synchronize(record_id=record_id)

    acts, _ = _trace(tmp_path, loss_item)
    syncs = [a for a in acts if a.kind == "sync"]
    assert len(syncs) == 1
    s = syncs[0]
    assert s.name == "stream_sync" and s.end_ns - s.start_ns == 5000
    assert s.stack[-1].kind is FrameKind.CUDA_API
    assert s.stack[-1].name == "cudaStreamSynchronize"  # the runtime call the program made
    assert _caller(s).endswith("loss_item")


def test_inner_sync_ids_join_only_a_waiting_call(fake, tmp_path):
    def after_a_launch():  # a record id just past a kernel launch: not a wait, no stack
        fake.launch()
        corr = fake.next_corr
        fake.next_corr += 1
        fake.pending.append(
            types.SimpleNamespace(
                kind=38, start=1, end=2, context_id=1, correlation_id=corr, stream_id=7, type=1
            )
        )

    acts, _ = _trace(tmp_path, after_a_launch)
    (sync,) = [a for a in acts if a.kind == "sync"]
    assert sync.stack == ()


def test_driver_alias_only_for_copies_and_syncs(fake, tmp_path):
    path = str(tmp_path / "none.sock")
    tx = Sender(path)
    tr = CuptiTracer(tx, TracerConfig(kinds=KINDS))
    tr.start()
    fake.launch()  # nested cuLaunchKernel: no alias
    assert len(tx.queues["launch"]) == 1
    fake.synchronize()  # runtime + nested cuStreamSynchronize alias with the same stack
    rows = list(tx.queues["launch"])[1:]
    assert len(rows) == 2 and rows[0][1:3] == rows[1][1:3] and rows[0][0] != rows[1][0]
    tr._teardown()


def _site_a(fk: FakeCupti) -> None:
    fk.launch("_Z5gemm_av")


def _site_b(fk: FakeCupti) -> None:
    fk.launch("_Z5gemm_bv")


def test_capture_replays_through_the_real_join(fake, tmp_path):
    cap = tmp_path / "frames.kpgcap.gz"

    def play():
        for i in range(300):  # interleaved launches from two call sites
            (_site_a if i % 3 else _site_b)(fake)
            if i % 50 == 0:
                fake.memcpy()
                fake.synchronize()
                fake.flush()

    live, rx = _trace(tmp_path, play, capture=str(cap))
    assert rx.capture is not None and cap.stat().st_size > 0
    again = replay(cap)
    assert again.batch.gpu_activities == tuple(live)
    assert again.batch.counters["gpu_kernels"] == 300
    kernels = [a for a in again.batch.gpu_activities if a.kind == "kernel"]
    for k in kernels:
        site = "_site_a" if k.name == "_Z5gemm_av" else "_site_b"
        assert _caller(k) == site, (k.name, k.stack)
    assert sum(k.name == "_Z5gemm_bv" for k in kernels) == 100
    assert again.targets  # the tracer's hello (versions, config) replays too
    kinds = [kind for kind, *_ in read_capture(cap)]
    assert kinds[-1] == capture_mod.CLOSE and kinds.count(capture_mod.CLOSE) == 1


def test_capture_from_environment_and_truncated_file(fake, tmp_path, monkeypatch):
    cap = tmp_path / "env.kpgcap.gz"
    monkeypatch.setenv(capture_mod.ENV_CAPTURE, str(cap))
    live, _ = _trace(tmp_path, lambda: [fake.launch() for _ in range(20)])
    assert len(replay(cap).batch.gpu_activities) == len(live) == 20
    # cut the file short (a recorder killed mid-write): replay keeps the whole records
    raw = gzip.decompress(cap.read_bytes())
    cut = tmp_path / "cut.kpgcap.gz"
    cut.write_bytes(gzip.compress(raw[: len(raw) - 7]))
    assert len(list(read_capture(cut))) == len(list(read_capture(cap))) - 1


def test_capture_refuses_other_schemas_and_other_files(tmp_path, monkeypatch):
    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(b"not a capture"))
    with pytest.raises(CaptureError, match="not a kubeprof GPU capture"):
        list(read_capture(path))
    w = capture_mod.CaptureWriter(tmp_path / "old.gz")
    w.close()
    monkeypatch.setitem(capture_mod.SCHEMAS, "kernel", ("start",))
    with pytest.raises(CaptureError, match="other wire schemas"):
        list(read_capture(tmp_path / "old.gz"))
