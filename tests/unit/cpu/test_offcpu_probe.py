"""The off-CPU probe's pure parts: knobs refused with the flag to fix, reasons named, and
an off-CPU record decoded with its wait (the ctypes mirror and the unpack agree)."""

from __future__ import annotations

import ctypes

import pytest

from kubeprof.agent.cpu import bpf_program, sampler
from kubeprof.agent.cpu.offcpu_probe import OffCpuKnobs, state_name
from kubeprof.agent.cpu.syscalls import syscall_name


def test_knobs_refuse_negative_values_naming_the_flag():
    with pytest.raises(ValueError, match="--offcpu-min-us"):
        OffCpuKnobs(min_us=-1)
    with pytest.raises(ValueError, match="--offcpu-every"):
        OffCpuKnobs(every=-2)
    assert not OffCpuKnobs(every=0).enabled
    assert OffCpuKnobs(min_us=0, every=1).enabled


@pytest.mark.parametrize(
    ("state", "name"),
    [(0x1, "sleeping"), (0x2, "disk"), (0x0, "preempted"), (0x100, "preempted"), (0x80, "idle")],
)
def test_state_names(state, name):
    assert state_name(state) == name


def test_syscall_names():
    assert (syscall_name(0), syscall_name(202), syscall_name(230)) == (
        "read",
        "futex",
        "clock_nanosleep",
    )
    assert syscall_name(9999) == "syscall 9999"


def test_off_cpu_record_decodes_its_wait():
    raw = bpf_program.RawSample()
    raw.ts, raw.pid, raw.tid, raw.comm = 123, 7, 8, b"worker"
    raw.ustack_len = raw.kstack_len = raw.py_len = 0
    raw.off, raw.blocked_ns, raw.syscall_nr, raw.state = 1, 5_000_000, 202, 1
    rec = sampler.decode(bytes(raw))
    assert (rec.ts_ns, rec.pid, rec.tid, rec.comm) == (123, 7, 8, "worker")
    assert (rec.off, rec.blocked_ns, rec.syscall_nr, rec.state) == (1, 5_000_000, 202, 1)
    assert ctypes.sizeof(raw) == sampler._STACK_AT


def test_collector_keeps_the_cpu_profile_when_the_off_cpu_probe_cannot_attach(monkeypatch):
    from kubeprof.agent.cpu import collector, preflight

    made = []

    class FakeSampler:
        def __init__(self, hz, offcpu):
            if offcpu is not None and offcpu.enabled:
                raise Exception("Failed to attach BPF program to tracepoint raw_syscalls:sys_exit")
            made.append(hz)

    monkeypatch.setattr(preflight, "check_environment", lambda: None)
    monkeypatch.setattr(collector, "Sampler", FakeSampler)
    c = collector.CpuCollector(99, offcpu=OffCpuKnobs())
    assert made == [99] and not c.offcpu.enabled
    assert c.warnings == [
        "off-CPU probe off (the on-CPU sampler runs): Failed to attach BPF "
        "program to tracepoint raw_syscalls:sys_exit"
    ]
