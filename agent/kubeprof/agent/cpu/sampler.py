"""The kernel side at run time: target tgids in, raw per-sample records out.

Records are decoded out of the ring buffer's mapped pages into plain Python tuples at
once (`ringbuf.RingReader`), because the kernel reuses a record's bytes as soon as it
is released.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import struct
import threading
from typing import Any, NamedTuple

from kubeprof.agent.cpu import bpf_program, btf, offcpu_probe
from kubeprof.agent.cpu.offcpu_probe import OffCpuKnobs
from kubeprof.agent.cpu.ringbuf import RingReader
from kubeprof.agent.cpython_layout import Layout

Buffer = bytes | bytearray | memoryview | mmap.mmap  # what decode() reads records from
_STACK_AT = ctypes.sizeof(bpf_program.RawSample)  # the stack bytes follow the fixed part
_PY_AT = bpf_program.RawSample.py.offset
_USTACK_AT = bpf_program.RawSample.ustack.offset
_KSTACK_AT = bpf_program.RawSample.kstack.offset
_STACK_MAX = bpf_program.STACK_PAGES * 4096
# The fixed head of `struct sample_t` (ts .. pad), read with one unpack per sample: a
# ctypes view costs a Python object per field access, a measurable share at 99 Hz per CPU.
_HEAD = struct.Struct(f"<QIIIiii{bpf_program.COMM_LEN}sQQQIIQqII")
assert _HEAD.size == _USTACK_AT, "RawSample and _HEAD disagree: keep them in step"


_WORDS = [
    struct.Struct(f"<{n}Q") for n in range(max(bpf_program.MAX_DEPTH, 3 * bpf_program.MAX_PY) + 1)
]
_COMMS: dict[bytes, str] = {}  # raw comm -> name: a handful of distinct thread names


class RawRecord(NamedTuple):
    """One sample as the kernel saw it: addresses, not names yet (a tuple: built per
    sample, and a frozen dataclass's field-by-field init costs a µs of it)."""

    ts_ns: int  # bpf_ktime_get_ns(): CLOCK_MONOTONIC
    pid: int
    tid: int
    cpu: int
    comm: str
    ustack: tuple[int, ...]  # leaf first, as the kernel walks it; () if missing
    kstack: tuple[int, ...]  # leaf first; () in user mode
    ustack_err: int = 0  # negative errno from bpf_get_stack, 0 if fine
    kstack_err: int = 0
    py_words: tuple[int, ...] = ()  # code, instr, flags of each frame, innermost first
    python_err: int = 0  # negative: the BPF walk found no thread state for the thread
    regs: tuple[int, int, int] = (0, 0, 0)  # user ip, sp, bp at the sample
    stack: bytes | memoryview = b""  # user stack from sp up, for the DWARF unwinder
    off: int = 0  # 1: an off-CPU wait (ts_ns is its first switch-out), 0: an on-CPU sample
    blocked_ns: int = 0  # off-CPU: ns off CPU in the wait
    syscall_nr: int = -1  # off-CPU: the syscall it waited in
    state: int = 0  # off-CPU: sched_switch's prev_state (offcpu_probe.state_name)

    @property
    def python(self) -> tuple[tuple[int, int, int], ...]:
        """The Python frames as (code, instr, flags), innermost first. Built on demand:
        the flat words are the cache key, and a loop's stacks repeat sample after sample."""
        words = iter(self.py_words)
        return tuple(zip(words, words, words, strict=True))


def _stack(buf: Buffer, at: int, length: int) -> tuple[tuple[int, ...], int]:
    """(addresses, 0) of a bpf_get_stack() array of ``length`` bytes, or ((), -errno)."""
    if length < 0:
        return (), length
    return _WORDS[min(length >> 3, bpf_program.MAX_DEPTH)].unpack_from(buf, at), 0


def _comm(raw: bytes) -> str:
    name = _COMMS.get(raw)
    if name is None:
        if len(_COMMS) > 4096:
            _COMMS.clear()
        name = _COMMS[raw] = raw.split(b"\0", 1)[0].decode(errors="replace")
    return name


def decode(buf: Buffer, at: int = 0, size: int | None = None, *, copy: bool = True) -> RawRecord:
    """The record of ``size`` bytes at offset ``at`` of ``buf`` (the mapped ring, or a
    copy of one record): the fixed part, then ``stack_len`` bytes of user stack.

    Only the parts the record uses are read; a record shorter than its fixed part is
    refused with ValueError, a stack longer than the record is cut to it. Without
    `copy`, ``buf`` must be a memoryview and the stack is a view into it (the unwinder
    reads a few words of several KiB: copying them all costs more than the walk)."""
    size = len(memoryview(buf)) - at if size is None else size
    if size < _STACK_AT:
        raise ValueError(f"ring-buffer record of {size} bytes: the fixed part is {_STACK_AT}")
    (
        ts,
        pid,
        tid,
        cpu,
        ulen,
        klen,
        py_len,
        comm,
        ip,
        sp,
        bp,
        stack_len,
        off,
        blocked,
        nr,
        state,
        _,
    ) = _HEAD.unpack_from(buf, at)
    ustack, uerr = _stack(buf, at + _USTACK_AT, ulen)
    kstack, kerr = _stack(buf, at + _KSTACK_AT, klen) if klen else ((), 0)
    py_words = (
        _WORDS[3 * min(py_len, bpf_program.MAX_PY)].unpack_from(buf, at + _PY_AT)
        if py_len > 0
        else ()
    )
    n_stack = min(stack_len, _STACK_MAX, size - _STACK_AT)
    stack: bytes | memoryview = b""
    if n_stack > 0:
        first = at + _STACK_AT
        view = (
            buf[first : first + n_stack]
            if type(buf) is memoryview
            else memoryview(buf)[first : first + n_stack]
        )
        stack = bytes(view) if copy else view
    return RawRecord(
        ts,
        pid,
        tid,
        cpu,
        _comm(comm),
        ustack,
        kstack,
        uerr,
        kerr,
        py_words,
        min(py_len, 0),
        (ip, sp, bp),
        stack,
        off,
        blocked,
        nr,
        state,
    )


def _decode_view(buf: memoryview, at: int, size: int) -> RawRecord:
    return decode(buf, at, size, copy=False)


class Sampler:
    """Owns the loaded BPF program: target map, ring buffer and drop counter."""

    def __init__(self, hz: int, offcpu: OffCpuKnobs | None = None) -> None:
        on = offcpu is not None and offcpu.enabled
        self._bpf: Any = bpf_program.load(
            hz, btf.fsbase_offset(), offcpu=on, start_stack=btf.start_stack_offsets()
        )
        if offcpu is not None and on:
            conf = self._bpf[b"off_conf"]
            conf[ctypes.c_int(0)] = ctypes.c_uint64(offcpu.min_us * 1000)
            conf[ctypes.c_int(1)] = ctypes.c_uint64(offcpu.every)
        self.offcpu = on
        self._targets = self._bpf[b"targets"]
        self._py_conf = self._bpf[b"py_conf"]
        try:
            self._ring: RingReader | None = RingReader(
                self._bpf[b"events"].map_fd, bpf_program.RINGBUF_PAGES * 4096
            )
        except BaseException:
            self._bpf.cleanup()
            raise

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

    def drain(self, *, hold: bool = False) -> list[RawRecord]:
        """Everything the ring buffer holds now, oldest first.

        With `hold`, each record's stack is a view into the ring, valid until
        `release()` (the records stay reserved in the ring until then); without, a copy.
        """
        if self._ring is None:
            return []
        return self._ring.consume(_decode_view if hold else decode, hold=hold)

    def release(self) -> None:
        """Hand the records of every `drain(hold=True)` so far back to the kernel."""
        if self._ring is not None:
            self._ring.release()

    @property
    def dropped(self) -> int:
        """Samples lost: the kernel could not reserve ring-buffer space for them, or the
        reader could not decode them (`RingReader.bad`)."""
        bad = self._ring.bad if self._ring is not None else 0
        return int(self._bpf[b"dropped"][ctypes.c_int(0)].value) + bad

    def follow_waits(self, waits: list[offcpu_probe.BlockedThread], now_ns: int) -> None:
        """Follow waits already under way from `now_ns` (CLOCK_MONOTONIC) on."""
        if not self.offcpu or self._bpf is None:
            return
        table = self._bpf[b"off_pending"]
        for w in waits:
            key = ctypes.c_uint32(w.tid)
            with contextlib.suppress(KeyError):
                table[key]
                continue  # the probe saw it already
            table[key] = offcpu_probe.OffEntry(now_ns, now_ns, 0, w.nr, w.state)

    def open_waits(self, now_ns: int) -> list[tuple[int, int, int, int]]:
        """(tid, start, ns off CPU so far, syscall) of every wait still followed: threads
        that are waiting as the session ends, reported without a stack."""
        if not self.offcpu or self._bpf is None:
            return []
        out = []
        for key, entry in self._bpf[b"off_pending"].items():
            blocked = entry.blocked + (now_ns - entry.out if entry.out else 0)
            out.append((key.value, entry.start, blocked, entry.nr))
        return out

    def offcpu_counters(self) -> dict[str, int]:
        """The off-CPU probe's counters summed over CPUs (offcpu_probe.COUNTERS); {} off."""
        if not self.offcpu or self._bpf is None:
            return {}
        stats = self._bpf[b"off_stats"]
        return {
            name: int(sum(stats.getvalue(ctypes.c_int(i))))
            for i, name in enumerate(offcpu_probe.COUNTERS)
        }

    def close(self) -> None:
        """Detach and free the program; safe to call twice."""
        if self._ring is not None:
            ring, self._ring = self._ring, None
            ring.close()
        if self._bpf is not None:
            bpf, self._bpf = self._bpf, None
            _detach_tracepoints_together(bpf)
            bpf.cleanup()


def _detach_tracepoints_together(bpf: Any) -> None:
    """Detach the program's tracepoints at once, one thread each: each detach waits for an
    RCU grace period in the kernel (~80 ms here), and one after another they added a
    quarter of a second to the end of every `kubeprof record`. A grace period is shared by
    all who wait on it, and bcc's ctypes calls drop the GIL. What fails is left to
    `cleanup()`, which tries the rest one by one as before."""
    names = list(getattr(bpf, "tracepoint_fds", {}))
    if len(names) < 2:
        return

    def detach(name: bytes) -> None:
        with contextlib.suppress(Exception):
            bpf.detach_tracepoint(name)

    threads = [threading.Thread(target=detach, args=(n,), daemon=True) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
