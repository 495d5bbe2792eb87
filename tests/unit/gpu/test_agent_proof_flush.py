"""Records reach the node agent while a switched-on tracer runs, and unfinished ones never
poison a batch (what the first H200 agent-proof run showed; tests/fixtures/gpu/agent_proof).

On that run every kernel of a 10 s session arrived at ``off`` in one batch (CUPTI hands over
a buffer by itself only once it is full), and that batch was refused by the ingest because
the forced flush at ``off`` returned one unfinished kernel record with no timestamps: the
whole session's kernels were lost. Its raw receiver input is kept as
``run1_single.kpgcap.gz``.
"""

from __future__ import annotations

import time
from pathlib import Path

from kubeprof.agent.gpu import control, inject
from kubeprof.agent.gpu.capture import read_capture, replay
from kubeprof.agent.gpu.receiver import GpuReceiver

RUN1 = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "gpu"
    / "agent_proof"
    / "run1_single.kpgcap.gz"
)


def test_h200_capture_of_run1_replays_without_the_unfinished_record() -> None:
    r = replay(RUN1)
    acts = r.batch.gpu_activities
    kernels = [a for a in acts if a.kind == "kernel"]
    assert len(kernels) == 3293 and all(a.stack for a in kernels)
    assert all(0 < a.start_ns <= a.end_ns for a in acts)
    assert r.batch.counters["gpu_incomplete_records"] == 1


def test_run1_delivered_nothing_until_off() -> None:
    """The defect itself, as recorded: ~40 chunks over the session held launches only."""
    rx = GpuReceiver("", capture_path="")
    conns: dict = {}
    arrived = []
    for kind, cid, ts, payload in read_capture(RUN1):
        conn = conns.get(cid) or conns.setdefault(cid, rx.new_connection())
        if kind == b"D":
            rx.feed(conn, payload)
        n = sum(1 for a in rx.poll().gpu_activities if a.kind == "kernel")
        if n:
            arrived.append(ts)
    assert len(arrived) == 1  # one chunk, at the very end


def test_switched_on_tracer_hands_records_over_while_it_runs(fake, tmp_path, monkeypatch):
    monkeypatch.setattr(inject.atexit, "register", lambda fn, *a: None)
    monkeypatch.setattr(inject, "_tracer", None)
    gpu_sock = str(tmp_path / "gpu.sock")
    rx = GpuReceiver(gpu_sock)
    rx.start()
    monkeypatch.setenv("KUBEPROF_GPU_SOCKET", gpu_sock)
    monkeypatch.setenv("KUBEPROF_GPU_DORMANT", "1")
    monkeypatch.setenv("KUBEPROF_GPU_KINDS", "kernel")
    monkeypatch.setenv("KUBEPROF_GPU_FLUSH_MS", "100")
    monkeypatch.setenv("KUBEPROF_POD_UID", "uid-1")
    dormant = inject.bootstrap()
    [ctl] = control.pod_sockets(gpu_sock, "uid-1")
    assert control.switch(ctl, "on") == "ok on"
    assert dormant.flusher is not None
    for _ in range(5):
        fake.launch("_Z3onev")
    got: list[str] = []
    deadline = time.monotonic() + 10
    while len(got) < 5 and time.monotonic() < deadline:  # still on: nothing forced by 'off'
        got += [a.name for a in rx.poll().gpu_activities]
        time.sleep(0.05)
    assert got == ["_Z3onev"] * 5
    assert control.switch(ctl, "off") == "ok off"
    assert dormant.flusher is None
    rx.stop(2.0)
