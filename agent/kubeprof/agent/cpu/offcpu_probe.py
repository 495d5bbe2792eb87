"""The off-CPU probe: where target threads wait, measured from the scheduler's tracepoints.

Kprobes are off on this project's kernels, so the wait is found with tracepoints only:

- ``sched:sched_switch`` runs in the context of the thread leaving the CPU. For a target
  thread it notes the switch-out time, the thread state and the syscall it blocks in
  (``orig_ax`` of its user registers) in ``off_pending``: a few words, no stack yet. The
  same event names the thread coming in; its wait so far is summed there.
- ``raw_syscalls:sys_exit`` runs in the context of the thread whose syscall returns, i.e.
  after its wait. Only here, and only for a wait at least ``min_ns`` long, is the stack
  taken, with the same in-kernel Python walk and user-stack copy as an on-CPU sample
  (the user stack has not changed since the thread blocked). The record goes through the
  on-CPU ring buffer with ``off = 1``.

So the costly part (stack, Python walk, a copy of up to 64 KiB of stack, user-space
unwinding) runs at most once per kept wait: a thread emits at most ``1 s / min_ns``
records per second, whatever its switch rate. What every switch still costs is one hash
lookup/update; keeping only 1 in ``every`` switch-outs (random) bounds that too, and each
kept wait then stands for ``every`` of them (``weight_ns``). Waits outside a syscall
(preemption, a page fault) have no sys_exit: they are counted, with their time, never
given a stack. Every skipped, short or unattributed wait is counted (``COUNTERS``), never
silently lost.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from kubeprof.agent.cpu import c_mirror
from kubeprof.protocol.settings import DEFAULT_OFFCPU_EVERY, DEFAULT_OFFCPU_MIN_US

# Per-CPU statistic slots of `off_stats`, as counter names in the Batch.
COUNTERS = (
    "offcpu_waits",  # waits kept: a record with a stack was written
    "offcpu_short",  # waits under the minimum blocked time (no stack taken)
    "offcpu_short_ns",  # their time off CPU
    "offcpu_skipped",  # switch-outs not followed (1-in-N switch sampling)
    "offcpu_unattributed",  # waits outside a syscall (preempted, page fault): no stack
    "offcpu_unattributed_ns",  # their time off CPU
    "offcpu_ring_full",  # kept waits the ring buffer had no room for
    "offcpu_table_full",  # switch-outs the pending table had no room for
)

OFFCPU_TEXT = r"""
struct off_t {
    u64 start;      /* first switch-out of this wait */
    u64 out;        /* latest switch-out; 0 while the thread is on a CPU */
    u64 blocked;    /* ns off CPU so far in this wait */
    s64 nr;         /* the syscall it blocked in (orig_ax), negative outside one */
    u64 state;      /* prev_state at the first switch-out */
};

BPF_TABLE("lru_hash", u32, struct off_t, off_pending, 65536);
BPF_ARRAY(off_conf, u64, 2);            /* [0] min blocked ns, [1] keep 1 in N switch-outs */
BPF_PERCPU_ARRAY(off_stats, u64, 8);    /* offcpu_probe.COUNTERS, in order */
BPF_ARRAY(off_scratch, struct sample_t, __NCPUS__);  /* per CPU id; apart: a perf event may nest */

static __always_inline void off_count(u32 slot, u64 n) {
    u64 *v = off_stats.lookup(&slot);
    if (v) *v += n;
}

static __always_inline s64 current_syscall(void) {
    struct task_struct *t = (struct task_struct *)bpf_get_current_task_btf();
    struct pt_regs *r = (struct pt_regs *)bpf_task_pt_regs(t);
    s64 nr = -1;
    bpf_probe_read_kernel(&nr, 8, &r->orig_ax);
    return nr;
}

TRACEPOINT_PROBE(sched, sched_switch) {
    u64 now = bpf_ktime_get_ns();
    u32 next = args->next_pid;
    struct off_t *w = off_pending.lookup(&next);
    if (w && w->out) {   /* a followed thread is back on a CPU */
        w->blocked += now - w->out;
        w->out = 0;
        if (w->nr < 0) {   /* no syscall to return from: count it here, no stack */
            off_count(4, 1);
            off_count(5, w->blocked);
            off_pending.delete(&next);
        }
    }
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32, tid = (u32)id;
    if (tgid == 0 || targets.lookup(&tgid) == NULL)
        return 0;
    w = off_pending.lookup(&tid);
    if (w) {   /* switched out again within the same wait */
        w->out = now;
        return 0;
    }
    u32 one = 1;
    u64 *every = off_conf.lookup(&one);
    if (every && *every > 1 && bpf_get_prandom_u32() % *every) {
        off_count(3, 1);
        return 0;
    }
    struct off_t n = {};
    n.start = now;
    n.out = now;
    n.state = args->prev_state;
    n.nr = current_syscall();
    if (off_pending.update(&tid, &n) != 0)
        off_count(7, 1);
    return 0;
}

TRACEPOINT_PROBE(raw_syscalls, sys_exit) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tid = (u32)id;
    struct off_t *w = off_pending.lookup(&tid);
    if (w == NULL)
        return 0;
    struct off_t d = *w;
    off_pending.delete(&tid);
    if (d.nr != args->id) {   /* it blocked outside this syscall (a fault's error code) */
        off_count(4, 1);
        off_count(5, d.blocked);
        return 0;
    }
    u32 zero = 0;
    u64 *min = off_conf.lookup(&zero);
    if (min && d.blocked < *min) {
        off_count(1, 1);
        off_count(2, d.blocked);
        return 0;
    }
    u32 cpu = bpf_get_smp_processor_id();
    struct sample_t *s = off_scratch.lookup(&cpu);
    if (s == NULL)
        return 0;
    fill_sample(args, s, id, 0);
    s->ts = d.start;
    s->off = 1;
    s->blocked_ns = d.blocked;
    s->syscall_nr = d.nr;
    s->state = (u32)d.state;
    if (emit_sample(s) != 0)
        off_count(6, 1);
    else
        off_count(0, 1);
    return 0;
}
"""


@dataclass(frozen=True, slots=True)
class OffCpuKnobs:
    """How much of the scheduler's traffic the probe follows (AgentSettings / record flags)."""

    min_us: int = DEFAULT_OFFCPU_MIN_US  # waits shorter than this get no stack (counted)
    every: int = DEFAULT_OFFCPU_EVERY  # follow 1 in `every` switch-outs; 0 = probe off

    def __post_init__(self) -> None:
        if self.min_us < 0:
            raise ValueError(
                f"off-CPU minimum blocked time {self.min_us} us is negative: "
                "use 0 or more (--offcpu-min-us)"
            )
        if self.every < 0:
            raise ValueError(
                f"off-CPU switch sampling 1 in {self.every} is negative: use 1 "
                "to follow every switch, N for 1 in N, 0 for off (--offcpu-every)"
            )

    @property
    def enabled(self) -> bool:
        return self.every > 0


class OffEntry(ctypes.Structure):
    """The ctypes mirror of `struct off_t` (a wait being followed)."""

    _fields_ = c_mirror.fields(OFFCPU_TEXT, "off_t")


@dataclass(frozen=True, slots=True)
class BlockedThread:
    """A thread found waiting in a syscall when it became a target (procfs)."""

    tid: int
    nr: int  # the syscall it waits in
    state: int  # 1 sleeping (S), 2 disk (D)


def blocked_threads(pid: int, proc: str = "/proc") -> list[BlockedThread]:
    """Threads of `pid` waiting in a syscall now: a wait already under way when profiling
    starts is followed from that moment (`sleep 1` blocks before any probe sees it)."""
    out: list[BlockedThread] = []
    try:
        tids = [int(t) for t in os.listdir(f"{proc}/{pid}/task")]
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"{proc}/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"{proc}/{pid}/task/{tid}/syscall") as f:
                first = f.read().split(" ", 1)[0]
        except OSError:
            continue
        state = stat[stat.rfind(")") + 2 :][:1]
        if state in ("S", "D") and first.lstrip("-").isdigit() and int(first) >= 0:
            out.append(BlockedThread(tid, int(first), 1 if state == "S" else 2))
    return out


# Thread states as sched_switch reports them (include/linux/sched.h, TASK_REPORT bits).
_STATES = ((0x1, "sleeping"), (0x2, "disk"), (0x4, "stopped"), (0x8, "traced"))


def state_name(state: int) -> str:
    """A thread state from sched_switch's prev_state: "sleeping" (S), "disk" (D), ...;
    "preempted" when it was still runnable."""
    for bit, name in _STATES:
        if state & bit:
            return name
    return "idle" if state & 0x80 else "preempted"
