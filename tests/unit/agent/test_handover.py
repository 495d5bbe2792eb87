"""The quick start's handover logic (agent/kubeprof/agent/cpu/handover.py), with stand-in
samplers that hand out timestamped samples; tests/integration/test_record_quick_start.py
runs it with real py-spy and BPF."""

from __future__ import annotations

import threading
import time

import pytest

from kubeprof.agent.cpu.collector import CollectorError
from kubeprof.agent.cpu.handover import HandoverCollector, runs_python
from kubeprof.model import Batch, CpuSample, Frame, FrameKind


def _sample(ts: int) -> CpuSample:
    return CpuSample(ts, 1, 1, "t", 0, (Frame("f", FrameKind.PYTHON, "x.py", 1),))


class FakeSampler:
    """Hands out one sample stamped now at every poll; the last one at stop."""

    def __init__(self, name: str) -> None:
        self.name, self.targets, self.stopped, self.warnings = name, [], False, []

    def add_target(self, pid: int) -> None:
        self.targets.append(pid)

    def poll(self) -> Batch:
        return Batch(samples=(_sample(time.monotonic_ns()),))

    def stop(self) -> Batch:
        self.stopped = True
        time.sleep(0.002)
        return Batch(samples=(_sample(time.monotonic_ns()),))  # taken after the handover


def _wait(h: HandoverCollector) -> None:
    h._ready.wait(5)  # the compile thread has ended: the test is exact


def test_pyspy_until_the_handover_then_bpf_and_nothing_twice():
    pyspy, bpf = FakeSampler("py-spy"), FakeSampler("bpf")
    gate = threading.Event()
    h = HandoverCollector(pyspy, lambda: (gate.wait(5), bpf)[1], lambda _m: None)
    h.add_target(42)
    before = h.poll()
    assert h.cpu_source == "py-spy" and len(before.samples) == 1 and pyspy.targets == [42]
    gate.set()
    _wait(h)
    at = h.poll()  # the handover: BPF gets the target, py-spy stops
    assert bpf.targets == [42] and pyspy.stopped and h.cpu_source == "bpf"
    handover = int(float(h.session_meta()["cpu_handover_s"]) * 1e9)
    assert handover >= 0
    # py-spy's sample taken at its stop (after the handover) is dropped; BPF's kept
    assert len(at.samples) == 1
    h.add_target(43)
    assert bpf.targets == [42, 43]
    h.stop()
    assert bpf.stopped


def test_bpf_that_cannot_load_leaves_pyspy_for_the_whole_run():
    pyspy = FakeSampler("py-spy")
    notes: list[str] = []

    def fail():
        raise CollectorError("BPF is not allowed here")

    h = HandoverCollector(pyspy, fail, notes.append)
    h.add_target(7)
    _wait(h)
    for _ in range(3):
        assert len(h.poll().samples) == 1
    assert len(notes) == 1 and "BPF is not allowed here" in notes[0]
    assert h.session_meta() == {"cpu_source": "py-spy", "cpu_bpf": "BPF is not allowed here"}
    assert len(h.stop().samples) == 1 and pyspy.stopped


def test_bpf_that_cannot_load_is_told_when_the_run_ends_before_any_poll():
    """A loaded machine opened the store after a 2 s command had ended: no poll came, and
    the user was never told BPF could not load (a CI run of the non-root install test)."""
    pyspy, notes = FakeSampler("py-spy"), []

    def fail():
        raise CollectorError("BPF is not allowed here")

    h = HandoverCollector(pyspy, fail, notes.append)
    h.add_target(7)
    _wait(h)
    assert len(h.stop().samples) == 1 and pyspy.stopped
    assert len(notes) == 1 and "BPF is not allowed here" in notes[0]
    assert "sampling with py-spy instead" in notes[0]
    assert h.stop().samples == () and len(notes) == 1  # told once


def test_a_run_that_ends_before_the_compile_does_not_wait_for_it():
    pyspy, bpf = FakeSampler("py-spy"), FakeSampler("bpf")
    gate = threading.Event()
    h = HandoverCollector(pyspy, lambda: (gate.wait(5), bpf)[1], lambda _m: None)
    h.add_target(1)
    t0 = time.monotonic()
    h.stop()
    assert time.monotonic() - t0 < 1 and pyspy.stopped
    assert h.session_meta() == {"cpu_source": "py-spy", "cpu_bpf": "compiling"}
    gate.set()
    _wait(h)
    time.sleep(0.05)
    assert bpf.stopped  # unloaded by the compile thread once it finished


@pytest.mark.parametrize(
    ("command", "python"),
    [
        (["python3", "x.py"], True),
        (["/usr/bin/python3.11", "-m", "x"], True),
        (["sleep", "1"], False),
        ([], False),
    ],
)
def test_which_commands_get_the_quick_start(command, python):
    assert runs_python(command) is python


def test_a_script_with_a_python_shebang_gets_the_quick_start(tmp_path):
    script = tmp_path / "train"
    script.write_text("#!/usr/bin/env python3\nprint(1)\n")
    script.chmod(0o755)
    assert runs_python([str(script)])
    script.write_text("#!/bin/sh\necho 1\n")
    assert not runs_python([str(script)])
