"""The node agent's GPU receiver trusts the kernel, not the tracer: records are attributed
to the connecting process's pid (SO_PEERCRED; in a pod the tracer only knows its container
pid), and a process outside the session's pods is not read at all."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path

from kubeprof.agent.gpu.receiver import GpuReceiver
from kubeprof.agent.gpu.wire import encode_frame


def say_hello(path: Path, claimed_pid: int) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(path))
        # A refused peer may be hung up on before its hello is written: that is the refusal.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(encode_frame({"t": "hello", "pid": claimed_pid, "argv": "train.py"}, {}))
        time.sleep(0.3)  # let the receiver's thread read it before we hang up


def test_records_carry_the_kernels_pid_not_the_claimed_one(tmp_path: Path) -> None:
    rx = GpuReceiver(str(tmp_path / "rx.sock"))
    rx.start()
    try:
        say_hello(tmp_path / "rx.sock", claimed_pid=1)  # pid 1 of its container
        deadline = time.monotonic() + 5
        while not rx.targets and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        rx.stop(2.0)
    assert list(rx.targets) == [os.getpid()]


def test_a_process_outside_the_sessions_pods_is_refused_and_counted(tmp_path: Path) -> None:
    asked: list[int] = []
    rx = GpuReceiver(str(tmp_path / "rx.sock"), mode=0o666)
    rx.accept_peer = lambda pid: asked.append(pid) or False
    rx.start()
    try:
        say_hello(tmp_path / "rx.sock", claimed_pid=4242)
    finally:
        batch = rx.stop(2.0)
    assert asked == [os.getpid()] and not rx.targets
    assert batch.counters.get("gpu_tracer_foreign") == 1
    assert (tmp_path / "rx.sock").exists() is False  # removed at stop
