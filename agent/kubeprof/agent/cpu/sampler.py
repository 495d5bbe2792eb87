"""The kernel side at run time: target tgids in, raw per-sample records out.

Records are copied out of the ring buffer into plain Python tuples at once, because the
buffer memory is reused as soon as the callback returns.
"""

from __future__ import annotations

import contextlib
import ctypes
import struct
from dataclasses import dataclass
from typing import Any

from kubeprof.agent.cpu import bpf_program, btf
from kubeprof.agent.cpu.cpython_layout import Layout

_STACK_AT = ctypes.sizeof(bpf_program.RawSample)  # the stack bytes follow the fixed part
_PY_AT = bpf_program.RawSample.py.offset
_USTACK_AT = bpf_program.RawSample.ustack.offset
_KSTACK_AT = bpf_program.RawSample.kstack.offset
_STACK_MAX = bpf_program.STACK_PAGES * 4096
# The fixed head of `struct sample_t` (ts .. pad), read with one unpack per sample: a
# ctypes view costs a Python object per field access, a measurable share at 99 Hz per CPU.
_HEAD = struct.Struct(f"<QIIIiii{bpf_program.COMM_LEN}sQQQII")
assert _HEAD.size == _USTACK_AT, "RawSample and _HEAD disagree: keep them in step"


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One sample as the kernel saw it: addresses, not names yet."""

    ts_ns: int  # bpf_ktime_get_ns(): CLOCK_MONOTONIC
    pid: int
    tid: int
    cpu: int
    comm: str
    ustack: tuple[int, ...]  # leaf first, as the kernel walks it; () if missing
    kstack: tuple[int, ...]  # leaf first; () in user mode
    ustack_err: int = 0  # negative errno from bpf_get_stack, 0 if fine
    kstack_err: int = 0
    python: tuple[tuple[int, int, int], ...] = ()  # (code, instr, flags), innermost first
    python_err: int = 0  # negative: the BPF walk found no thread state for the thread
    regs: tuple[int, int, int] = (0, 0, 0)  # user ip, sp, bp at the sample
    stack: bytes = b""  # user stack from sp up, for the DWARF unwinder


def _stack(fixed: bytes, at: int, length: int) -> tuple[tuple[int, ...], int]:
    """(addresses, 0) of a bpf_get_stack() array of ``length`` bytes, or ((), -errno)."""
    if length < 0:
        return (), length
    n = min(length // 8, bpf_program.MAX_DEPTH)
    return struct.unpack_from(f"<{n}Q", fixed, at), 0


def decode(fixed: bytes, data: int = 0) -> RawRecord:
    """One ring-buffer record: ``fixed`` is its first ``sizeof(RawSample)`` bytes, the
    user stack bytes follow at ``data + sizeof(RawSample)`` (read only when ``data``)."""
    ts, pid, tid, cpu, ulen, klen, py_len, comm, ip, sp, bp, stack_len, _ = _HEAD.unpack_from(
        fixed
    )
    ustack, uerr = _stack(fixed, _USTACK_AT, ulen)
    kstack, kerr = _stack(fixed, _KSTACK_AT, klen)
    n_py = max(0, min(py_len, bpf_program.MAX_PY))
    words = iter(struct.unpack_from(f"<{3 * n_py}Q", fixed, _PY_AT))
    n_stack = min(stack_len, _STACK_MAX)
    return RawRecord(
        ts_ns=ts,
        pid=pid,
        tid=tid,
        cpu=cpu,
        comm=comm.split(b"\0", 1)[0].decode(errors="replace"),
        ustack=ustack,
        kstack=kstack,
        ustack_err=uerr,
        kstack_err=kerr,
        python=tuple(zip(words, words, words, strict=True)),
        python_err=min(py_len, 0),
        regs=(ip, sp, bp),
        stack=ctypes.string_at(data + _STACK_AT, n_stack) if data and n_stack else b"",
    )


class Sampler:
    """Owns the loaded BPF program: target map, ring buffer and drop counter."""

    def __init__(self, hz: int) -> None:
        self._bpf: Any = bpf_program.load(hz, btf.fsbase_offset())
        self._pending: list[RawRecord] = []
        self._targets = self._bpf[b"targets"]
        self._py_conf = self._bpf[b"py_conf"]
        self._bpf[b"events"].open_ring_buffer(self._on_event)

    def _on_event(self, _ctx: int, data: int, _size: int) -> int:
        self._pending.append(decode(ctypes.string_at(data, _STACK_AT), data))
        return 0  # bcc's wrapper int()s the result: None would raise and be caught, per record

    def add_tgid(self, tgid: int) -> None:
        """Sample this process from now on (its later forks join in the kernel)."""
        self._targets[ctypes.c_uint32(tgid)] = ctypes.c_uint8(1)

    def set_python(self, tgid: int, layout: Layout, runtime_addr: int, code_type: int) -> None:
        """Walk this process's Python frames in the kernel, with these offsets."""
        conf = bpf_program.PyConf(
            runtime_addr + layout.runtime_interpreters_head,
            layout.interp_threads_head,
            layout.tstate_next,
            layout.tstate_thread_id,
            int(layout.tid_is_native),
            layout.tstate_frame,
            layout.cframe_current_frame,
            layout.frame_code,
            layout.frame_previous,
            layout.frame_instr,
            layout.frame_flags,
            layout.cframe_previous,
            0,
            code_type,
        )
        self._py_conf[ctypes.c_uint32(tgid)] = conf

    def clear_python(self, tgid: int) -> None:
        """No Python walk for this process (it exec()ed something else)."""
        with contextlib.suppress(KeyError):
            del self._py_conf[ctypes.c_uint32(tgid)]

    def tgids(self) -> set[int]:
        """Every tgid in the kernel's target set (children forked since included)."""
        return {k.value for k in self._targets.keys()}  # noqa: SIM118 (bcc table)

    def drain(self) -> list[RawRecord]:
        """Everything the ring buffer holds now, oldest first."""
        self._bpf.ring_buffer_consume()
        out, self._pending = self._pending, []
        return out

    @property
    def dropped(self) -> int:
        """Samples the kernel could not reserve ring-buffer space for."""
        return int(self._bpf[b"dropped"][ctypes.c_int(0)].value)

    def close(self) -> None:
        """Detach and free the program; safe to call twice."""
        if self._bpf is not None:
            bpf, self._bpf = self._bpf, None
            bpf.cleanup()
