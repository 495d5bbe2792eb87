"""Ring-buffer records to RawRecord: the struct-based decoder against the ctypes mirror of
`struct sample_t`, so the two cannot drift apart unnoticed."""

import ctypes

import pytest

from kubeprof.agent.cpu import bpf_program
from kubeprof.agent.cpu.sampler import decode


def record(**fields) -> tuple[bytes, ctypes.Array]:
    raw = bpf_program.RawSample()
    for k, v in fields.items():
        setattr(raw, k, v)
    stack = b"".join(i.to_bytes(8, "little") for i in range(1, 9))
    buf = ctypes.create_string_buffer(bytes(raw) + stack)
    return bytes(raw), buf


def test_every_field_lands_where_the_bpf_program_wrote_it():
    _, buf = record(
        ts=123456789012,
        pid=4242,
        tid=4243,
        cpu=1,
        ustack_len=3 * 8,
        kstack_len=2 * 8,
        py_len=2,
        comm=b"python3.11",
        ip=0x401000,
        sp=0x7FFF0000,
        bp=0x7FFF0040,
        stack_len=64,
    )
    raw = bpf_program.RawSample.from_buffer(buf)
    raw.ustack[0], raw.ustack[1], raw.ustack[2] = 0x401000, 0x402000, 0x403000
    raw.kstack[0], raw.kstack[1] = 0xFFFF0001, 0xFFFF0002
    raw.py[0].code, raw.py[0].instr, raw.py[0].flags = 0xC0DE, 0x10, 1
    raw.py[1].code, raw.py[1].instr, raw.py[1].flags = 0xC0DF, 0x20, 0
    rec = decode(bytes(buf)[:-1])  # create_string_buffer's NUL is not part of the record
    assert (rec.ts_ns, rec.pid, rec.tid, rec.cpu, rec.comm) == (
        123456789012,
        4242,
        4243,
        1,
        "python3.11",
    )
    assert rec.ustack == (0x401000, 0x402000, 0x403000) and rec.ustack_err == 0
    assert rec.kstack == (0xFFFF0001, 0xFFFF0002) and rec.kstack_err == 0
    assert rec.python == ((0xC0DE, 0x10, 1), (0xC0DF, 0x20, 0)) and rec.python_err == 0
    assert rec.regs == (0x401000, 0x7FFF0000, 0x7FFF0040)
    assert rec.stack == b"".join(i.to_bytes(8, "little") for i in range(1, 9))


def test_errors_and_empty_parts():
    fixed, _ = record(ustack_len=-14, kstack_len=0, py_len=-3, comm=b"x" * 16, stack_len=0)
    rec = decode(fixed)
    assert rec.ustack == () and rec.ustack_err == -14  # -EFAULT from bpf_get_stack
    assert rec.kstack == () and rec.kstack_err == 0
    assert rec.python == () and rec.python_err == -3
    assert rec.comm == "x" * 16 and rec.stack == b""  # a full comm has no NUL


def test_a_record_inside_the_ring_reads_only_its_own_bytes():
    fixed, _ = record(pid=7, stack_len=64, sp=0x1000)
    stack = bytes(range(64))
    ring = b"\xee" * 24 + fixed + stack + b"\xff" * 40  # neighbours on both sides
    rec = decode(ring, 24, len(fixed) + 64)
    assert rec.pid == 7 and rec.stack == stack
    short = decode(ring, 24, len(fixed) + 16)  # a record claiming more stack than it has
    assert short.stack == stack[:16]
    with pytest.raises(ValueError, match="fixed part"):
        decode(ring, 24, len(fixed) - 1)
