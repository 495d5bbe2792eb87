"""The kernel side at run time: target tgids in, raw per-sample records out.

Records are copied out of the ring buffer into plain Python tuples at once, because the
buffer memory is reused as soon as the callback returns.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from kubeprof.agent.cpu import bpf_program


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


def _stack(addrs: ctypes.Array[ctypes.c_uint64], length: int) -> tuple[tuple[int, ...], int]:
    if length < 0:
        return (), length
    return tuple(addrs[: length // 8]), 0


class Sampler:
    """Owns the loaded BPF program: target map, ring buffer and drop counter."""

    def __init__(self, hz: int) -> None:
        self._bpf: Any = bpf_program.load(hz)
        self._pending: list[RawRecord] = []
        self._targets = self._bpf[b"targets"]
        self._bpf[b"events"].open_ring_buffer(self._on_event)

    def _on_event(self, _ctx: int, data: int, _size: int) -> None:
        raw = ctypes.cast(data, ctypes.POINTER(bpf_program.RawSample)).contents
        ustack, uerr = _stack(raw.ustack, raw.ustack_len)
        kstack, kerr = _stack(raw.kstack, raw.kstack_len)
        self._pending.append(
            RawRecord(
                ts_ns=raw.ts,
                pid=raw.pid,
                tid=raw.tid,
                cpu=raw.cpu,
                comm=raw.comm.decode(errors="replace"),
                ustack=ustack,
                kstack=kstack,
                ustack_err=uerr,
                kstack_err=kerr,
            )
        )

    def add_tgid(self, tgid: int) -> None:
        """Sample this process from now on (its later forks join in the kernel)."""
        self._targets[ctypes.c_uint32(tgid)] = ctypes.c_uint8(1)

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
