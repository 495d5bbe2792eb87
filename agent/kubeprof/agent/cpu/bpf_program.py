"""The BPF C program of the CPU sampler, and the code that compiles and attaches it.

One record per sample (timestamp, ids, CPU, comm and both raw stacks) goes through a BPF
ring buffer, so reports get per-sample timestamps; stacks are copied with bpf_get_stack
into the record itself, which avoids a stack-id map that fills up or collides over long
sessions. The target set is a BPF hash of tgids, grown in the kernel from the
sched_process_fork tracepoint so children forked between two polls are never missed.
"""

from __future__ import annotations

import ctypes
from typing import Any

MAX_DEPTH = 127  # the kernel's default perf_event_max_stack
COMM_LEN = 16
RINGBUF_PAGES = 512  # 2 MiB: several seconds of samples at 99 Hz on many CPUs

BPF_TEXT = r"""
#include <uapi/linux/ptrace.h>
#include <uapi/linux/bpf_perf_event.h>

#define MAX_DEPTH __MAX_DEPTH__

struct sample_t {
    u64 ts;
    u32 pid;
    u32 tid;
    u32 cpu;
    s32 ustack_len;   /* bytes, or a negative errno */
    s32 kstack_len;
    char comm[16];
    u64 ustack[MAX_DEPTH];
    u64 kstack[MAX_DEPTH];
};

BPF_HASH(targets, u32, u8, 65536);
BPF_ARRAY(dropped, u64, 1);
BPF_RINGBUF_OUTPUT(events, __RINGBUF_PAGES__);

int on_cpu_clock(struct bpf_perf_event_data *ctx) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
    if (tgid == 0 || targets.lookup(&tgid) == NULL)
        return 0;
    struct sample_t *s = events.ringbuf_reserve(sizeof(struct sample_t));
    if (s == NULL) {
        u32 zero = 0;
        u64 *n = dropped.lookup(&zero);
        if (n) __sync_fetch_and_add(n, 1);
        return 0;
    }
    s->ts = bpf_ktime_get_ns();
    s->pid = tgid;
    s->tid = (u32)id;
    s->cpu = bpf_get_smp_processor_id();
    bpf_get_current_comm(&s->comm, sizeof(s->comm));
    s->ustack_len = bpf_get_stack(ctx, s->ustack, sizeof(s->ustack), BPF_F_USER_STACK);
    s->kstack_len = bpf_get_stack(ctx, s->kstack, sizeof(s->kstack), 0);
    events.ringbuf_submit(s, 0);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_fork) {
    u32 parent = bpf_get_current_pid_tgid() >> 32;
    if (targets.lookup(&parent) == NULL)
        return 0;
    u32 child = args->child_pid;   /* a new thread's tid is harmless: tgids are keys */
    u8 one = 1;
    targets.update(&child, &one);
    return 0;
}
"""


class RawSample(ctypes.Structure):
    """The ctypes mirror of `struct sample_t`; keep in step with BPF_TEXT."""

    _fields_ = [
        ("ts", ctypes.c_uint64),
        ("pid", ctypes.c_uint32),
        ("tid", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32),
        ("ustack_len", ctypes.c_int32),
        ("kstack_len", ctypes.c_int32),
        ("comm", ctypes.c_char * COMM_LEN),
        ("ustack", ctypes.c_uint64 * MAX_DEPTH),
        ("kstack", ctypes.c_uint64 * MAX_DEPTH),
    ]


def program_text() -> str:
    """The C text with its constants filled in (bcc's -D flags would work too)."""
    return BPF_TEXT.replace("__MAX_DEPTH__", str(MAX_DEPTH)).replace(
        "__RINGBUF_PAGES__", str(RINGBUF_PAGES)
    )


def load(hz: int) -> Any:
    """Compile the program and attach it to a CPU_CLOCK perf event on every CPU.

    Raises whatever bcc raises; the collector turns it into a one-line cause and fix.
    """
    from bcc import BPF, PerfSWConfig, PerfType

    bpf = BPF(text=program_text().encode())
    bpf.attach_perf_event(
        ev_type=PerfType.SOFTWARE,
        ev_config=PerfSWConfig.CPU_CLOCK,
        fn_name=b"on_cpu_clock",
        sample_freq=hz,
        cpu=-1,
    )
    return bpf
