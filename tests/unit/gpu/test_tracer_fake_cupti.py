"""The tracer against a fake cupti: joins, nested driver launches, failures, no blocking."""

from __future__ import annotations

import threading
import time

import pytest
from fake_cupti import FakeCupti

from kubeprof.agent.gpu.tracer import CuptiTracer, TracerConfig, TracerError
from kubeprof.agent.gpu.wire import Sender
from kubeprof.model import FrameKind


def model_forward(fk: FakeCupti, n: int) -> None:
    for _ in range(n):
        fk.launch("_Z4gemmv")
    fk.launch("nvjet_sm90_tst", driver_only=True)


def test_every_kernel_joined_to_its_python_stack(fake, wire):
    rx, tx = wire
    tr = CuptiTracer(tx, TracerConfig(kinds=("kernel",)))
    tr.start()
    tx.start()
    model_forward(fake, 100)
    tr.stop()
    acts = rx.stop(2.0).gpu_activities
    assert len(acts) == 101
    for a in acts:
        names = [f.name for f in a.stack]
        assert "model_forward" in names, names
        assert a.stack[-1].kind is FrameKind.CUDA_API
    apis = {a.stack[-1].name for a in acts}
    assert apis == {"api211", "api307"}  # runtime launch, and the driver-only one
    assert all(a.demangled in ("gemm()", "nvjet_sm90_tst") for a in acts)
    assert acts[0].shared_mem == 256 and acts[0].grid == (2, 1, 1)
    # CUPTI timestamps are moved onto the host's CLOCK_MONOTONIC by the receiver
    assert abs(acts[0].start_ns - time.monotonic_ns()) < 60e9


def test_the_python_callback_stamps_each_launch_with_its_time_and_thread(fake, wire):
    """The pure-Python path sends what the C hook sends: the call's host CLOCK_MONOTONIC
    (between two clock reads around it) and the calling thread's kernel id, for a nested
    copy's driver alias as well; a native thread's launch has that thread's id."""
    rx, tx = wire
    tr = CuptiTracer(tx, TracerConfig(kinds=("kernel", "memcpy"), hook="python"))
    tr.start()
    tx.start()
    me = threading.get_native_id()
    before = time.monotonic_ns()
    kernel = fake.launch()
    copy = fake.memcpy()
    after = time.monotonic_ns()
    fake.native_thread = True
    native = fake.launch()
    fake.native_thread = False
    tr.stop()
    acts = {a.correlation_id: a for a in rx.stop(2.0).gpu_activities}
    assert before <= acts[kernel].launch_ns <= acts[copy].launch_ns <= after
    assert acts[kernel].launch_tid == acts[copy].launch_tid == me
    assert after <= acts[native].launch_ns and acts[native].launch_tid not in (0, me)


def test_nested_driver_callbacks_are_not_sent(fake, wire):
    _, tx = wire
    tr = CuptiTracer(tx, TracerConfig(kinds=("kernel",)))
    tr.start()
    fake.launch()
    assert len(tx.queues["launch"]) == 1  # runtime enter only; nested driver skipped
    tr._teardown()


def test_multiple_subscribers_is_one_clear_error(fake, wire):
    _, tx = wire
    fake.busy = True
    with pytest.raises(TracerError, match="already in use by another profiler"):
        CuptiTracer(tx).start()
    assert not fake.activities


def test_pause_resume_stops_records(fake, wire):
    rx, tx = wire
    tr = CuptiTracer(tx, TracerConfig(kinds=("kernel",)))
    tr.start()
    tx.start()
    tr.pause()
    fake.launch()
    tr.resume()
    fake.launch()
    tr.stop()
    assert len(rx.stop(2.0).gpu_activities) == 1


def test_receiver_gone_never_blocks_and_counts_drops(fake, tmp_path, capsys):
    tx = Sender(str(tmp_path / "nobody.sock"), interval_s=0.01)
    tr = CuptiTracer(tx, TracerConfig(kinds=("kernel",)))
    tr.start()
    tx.start()
    t0 = time.monotonic()
    for _ in range(2000):
        fake.launch()
    tr.stop(timeout_s=0.5)
    assert time.monotonic() - t0 < 5
    assert tx.counters["dropped"] >= 4000  # 2000 launches + 2000 kernels
    assert "GPU records dropped" in capsys.readouterr().err


def test_bounded_queue_in_target(fake, tmp_path):
    tx = Sender(str(tmp_path / "nobody.sock"), max_queued=100)
    tr = CuptiTracer(tx, TracerConfig(kinds=("kernel",)))
    tr.start()
    for _ in range(500):
        fake.launch()
    assert len(tx.queues["launch"]) == 100
    assert tx.counters["dropped"] == 400
    tr._teardown()


def test_config_from_env_rejects_unknown_kinds():
    with pytest.raises(TracerError, match="unknown KUBEPROF_GPU_KINDS"):
        TracerConfig.from_env({"KUBEPROF_GPU_KINDS": "kernel,bogus"})
    cfg = TracerConfig.from_env({"KUBEPROF_GPU_STACKS": "full", "KUBEPROF_GPU_CALLBACKS": "0"})
    assert cfg.stacks == "full" and not cfg.callbacks
