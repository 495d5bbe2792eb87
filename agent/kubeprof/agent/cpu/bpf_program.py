"""The BPF C program of the CPU sampler, and the code that compiles and attaches it.

One record per sample (timestamp, ids, CPU, comm, both kernel-walked stacks, the Python
frame chain and a copy of the user stack) goes through a BPF ring buffer, so reports get
per-sample timestamps; stacks are copied with bpf_get_stack into the record itself, which
avoids a stack-id map that fills up or collides over long sessions.

Python frames are walked here, in the kernel, at the sample: the thread's PyThreadState is
found through `_PyRuntime` (cached per tid, re-checked each time) and its interpreter
frame chain copied as (code object, instruction pointer, flags) triples; user space names
them. The user registers and up to 64 KiB of the user stack go along so user space can
unwind native code through .eh_frame (CPython here has no frame pointers). 64 KiB, as
perf's DWARF mode allows at most: OpenBLAS's threaded dgemm alone keeps a ~20 KiB frame,
and a 24 KiB copy cut a fifth of a numpy program's stacks short of their root.

The target set is a BPF hash of tgids, grown in the kernel from the sched_process_fork
tracepoint so children forked between two polls are never missed.
"""

from __future__ import annotations

import ctypes
from typing import Any

from kubeprof.agent.cpu import c_mirror, offcpu_probe

MAX_DEPTH = 127  # the kernel's default perf_event_max_stack
MAX_PY = 96  # Python frames walked per sample (deeper stacks keep their innermost 96)
MAX_THREADS = 64  # thread states searched for the sampled thread
STACK_PAGES = 16  # user stack copied for the DWARF unwinder: up to 64 KiB above sp
COMM_LEN = 16
RINGBUF_PAGES = 4096  # 16 MiB: records carry only the stack bytes copied (most < 16 KiB)

BPF_TEXT = r"""
#include <uapi/linux/ptrace.h>
#include <uapi/linux/bpf_perf_event.h>

#define MAX_DEPTH __MAX_DEPTH__
#define MAX_PY __MAX_PY__
#define MAX_THREADS __MAX_THREADS__
#define STACK_PAGES __STACK_PAGES__
#define STACK_BYTES (STACK_PAGES * 4096)

/* Per-process: where the interpreter keeps its threads and frames (cpython_layout.py). */
struct py_conf_t {
    u64 interp_head;        /* address of _PyRuntime.interpreters.head */
    s32 interp_threads;     /* interp->threads.head */
    s32 tstate_next;
    s32 tstate_tid;         /* native_thread_id (tid) or thread_id (pthread_t) */
    s32 tid_is_native;
    s32 tstate_frame;
    s32 cframe_frame;       /* -1: tstate_frame is the frame pointer itself */
    s32 frame_code;
    s32 frame_previous;
    s32 frame_instr;
    s32 frame_flags;        /* -1: none (3.10) */
    s32 cframe_previous;    /* _PyCFrame.previous (3.11/3.12), else -1 */
    s32 pad;
    u64 code_type;          /* address of PyCode_Type: a frame's code must be one */
};

struct py_frame_t {
    u64 code;
    u64 instr;
    u64 flags;
};

struct sample_t {
    u64 ts;
    u32 pid;
    u32 tid;
    u32 cpu;
    s32 ustack_len;   /* bytes, or a negative errno */
    s32 kstack_len;
    s32 py_len;       /* frames, or a negative step code (no thread state, ...) */
    char comm[16];
    u64 ip;           /* user registers at the sample, for the DWARF unwinder */
    u64 sp;
    u64 bp;
    u32 stack_len;    /* bytes of user stack copied from sp */
    u32 off;          /* 0: an on-CPU sample; 1: an off-CPU wait (offcpu_probe.py) */
    u64 blocked_ns;   /* off-CPU: ns off CPU since ts (the first switch-out) */
    s64 syscall_nr;   /* off-CPU: the syscall it waited in */
    u32 state;        /* off-CPU: sched_switch prev_state at the switch-out */
    u32 pad;
    u64 ustack[MAX_DEPTH];
    u64 kstack[MAX_DEPTH];
    struct py_frame_t py[MAX_PY];
    u8 stack[STACK_BYTES];
};

BPF_HASH(targets, u32, u8, 65536);
BPF_HASH(py_conf, u32, struct py_conf_t, 4096);
BPF_HASH(tstates, u32, u64, 65536);   /* tid -> its PyThreadState, checked at each use */
BPF_ARRAY(dropped, u64, 1);
/* One record per CPU, indexed by CPU id: a per-CPU array's value stops at 32 KiB. */
BPF_ARRAY(scratch, struct sample_t, __NCPUS__);
BPF_RINGBUF_OUTPUT(events, __RINGBUF_PAGES__);

static __always_inline u64 read_ptr(u64 addr) {
    u64 v = 0;
    if (bpf_probe_read_user(&v, sizeof(v), (void *)addr) != 0)
        return 0;
    return v;
}

/* The thread's id as CPython stores it: the OS tid, or (3.10) pthread_self(), i.e. the
   thread pointer, which is the fs base register on x86-64. */
static __always_inline u64 python_tid(struct py_conf_t *c, u32 tid) {
    if (c->tid_is_native)
        return tid;
    u64 fsbase = 0;
    struct task_struct *t = (struct task_struct *)bpf_get_current_task();
    bpf_probe_read_kernel(&fsbase, sizeof(fsbase), (void *)t + __FSBASE_OFFSET__);
    return fsbase;
}

static __always_inline u64 find_tstate(struct py_conf_t *c, u32 tid) {
    u64 want = python_tid(c, tid);
    if (want == 0)
        return 0;
    u64 *cached = tstates.lookup(&tid);
    if (cached && *cached && read_ptr(*cached + c->tstate_tid) == want)
        return *cached;
    u64 interp = read_ptr(c->interp_head);
    if (interp == 0)
        return 0;
    u64 ts = read_ptr(interp + c->interp_threads);
    for (int i = 0; i < MAX_THREADS && ts; i++) {
        if (read_ptr(ts + c->tstate_tid) == want) {
            tstates.update(&tid, &ts);
            return ts;
        }
        ts = read_ptr(ts + c->tstate_next);
    }
    return 0;
}

static __always_inline int is_code(struct py_conf_t *c, u64 code) {
    return code != 0 && read_ptr(code + 8) == c->code_type;   /* ob_type */
}

static __always_inline int walk_python(struct sample_t *s, u32 pid, u32 tid) {
    struct py_conf_t *c = py_conf.lookup(&pid);
    if (c == NULL)
        return 0;
    u64 ts = find_tstate(c, tid);
    if (ts == 0)
        return -1;
    u64 frame = read_ptr(ts + c->tstate_frame);
    if (c->cframe_frame >= 0 && frame) {
        u64 cframe = frame;
        frame = read_ptr(cframe + c->cframe_frame);
        /* Caught entering or leaving _PyEval_EvalFrameDefault (3.11/3.12), the C-stack
           cframe's current_frame is not set yet: the caller's cframe holds the stack
           the thread is really running (the frame being entered has not started). */
        if (c->cframe_previous >= 0 && !is_code(c, read_ptr(frame + c->frame_code))) {
            u64 prev = read_ptr(cframe + c->cframe_previous);
            frame = prev ? read_ptr(prev + c->cframe_frame) : 0;
        }
    }
    int n = 0;
    for (int i = 0; i < MAX_PY; i++) {
        if (frame == 0)
            break;
        struct py_frame_t *f = &s->py[i];
        f->code = read_ptr(frame + c->frame_code);
        f->instr = read_ptr(frame + c->frame_instr);
        f->flags = c->frame_flags >= 0 ? read_ptr(frame + c->frame_flags) : 0;
        n = i + 1;
        frame = read_ptr(frame + c->frame_previous);
    }
    return n;
}

/* The main thread's stack top (mm->start_stack), 0 for other threads or where the
   kernel's BTF did not give the offsets. */
static __always_inline u64 main_stack_top(u32 pid, u32 tid) {
    if (pid != tid || __MM_OFFSET__ == 0 || __START_STACK_OFFSET__ == 0)
        return 0;
    u64 mm = 0, top = 0;
    struct task_struct *t = (struct task_struct *)bpf_get_current_task();
    bpf_probe_read_kernel(&mm, sizeof(mm), (void *)t + __MM_OFFSET__);
    if (mm)
        bpf_probe_read_kernel(&top, sizeof(top), (void *)mm + __START_STACK_OFFSET__);
    return top;
}

/* Copy the user stack from sp page by page. A page that cannot be read ends the copy,
   except below the main thread's stack top: there it is a page of a big frame never
   touched (never faulted in), left as zeros (bpf_probe_read_user zeroes on failure) so
   the frames above it are still copied. */
static __always_inline void copy_stack(struct sample_t *s) {
    u64 sp = s->sp;
    s->stack_len = 0;
    if (sp == 0)
        return;
    u64 top = main_stack_top(s->pid, s->tid);
    u64 room = top > sp ? top - sp : 0;
    u32 first = 4096 - (sp & 4095);
    if (bpf_probe_read_user(&s->stack[0], first, (void *)sp) != 0)
        return;
    u32 len = first;
#pragma unroll
    for (int i = 1; i < STACK_PAGES; i++) {
        u32 off = first + (i - 1) * 4096;
        if (off > STACK_BYTES - 4096)
            break;
        if (bpf_probe_read_user(&s->stack[off], 4096, (void *)(sp + off)) == 0)
            len = off + 4096;
        else if (off + 4096 > room)
            break;
    }
    s->stack_len = len;
}

/* Everything a sample holds, taken in the context of the thread `id` (current). */
static __always_inline void fill_sample(void *ctx, struct sample_t *s, u64 id, int kernel) {
    u32 tgid = id >> 32;
    s->ts = bpf_ktime_get_ns();
    s->pid = tgid;
    s->tid = (u32)id;
    s->cpu = bpf_get_smp_processor_id();
    s->off = 0;
    s->blocked_ns = 0;
    s->syscall_nr = -1;
    s->state = 0;
    bpf_get_current_comm(&s->comm, sizeof(s->comm));
    s->ustack_len = bpf_get_stack(ctx, s->ustack, sizeof(s->ustack), BPF_F_USER_STACK);
    s->kstack_len = kernel ? bpf_get_stack(ctx, s->kstack, sizeof(s->kstack), 0) : 0;
    struct task_struct *t = (struct task_struct *)bpf_get_current_task_btf();
    struct pt_regs *r = (struct pt_regs *)bpf_task_pt_regs(t);
    s->ip = 0; s->sp = 0; s->bp = 0;
    bpf_probe_read_kernel(&s->ip, 8, &r->ip);
    bpf_probe_read_kernel(&s->sp, 8, &r->sp);
    bpf_probe_read_kernel(&s->bp, 8, &r->bp);
    s->py_len = walk_python(s, tgid, s->tid);
    copy_stack(s);
}

/* The record into the ring (only the user stack bytes copied); non-zero when full. */
static __always_inline int emit_sample(struct sample_t *s) {
    u64 size = sizeof(struct sample_t) - STACK_BYTES + s->stack_len;
    if (size > sizeof(struct sample_t))
        size = sizeof(struct sample_t);
    return events.ringbuf_output(s, size, 0);
}

int on_cpu_clock(struct bpf_perf_event_data *ctx) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
    if (tgid == 0 || targets.lookup(&tgid) == NULL)
        return 0;
    u32 zero = 0, cpu = bpf_get_smp_processor_id();
    struct sample_t *s = scratch.lookup(&cpu);
    if (s == NULL)
        return 0;
    fill_sample(ctx, s, id, 1);
    if (emit_sample(s) != 0) {
        u64 *n = dropped.lookup(&zero);
        if (n) __sync_fetch_and_add(n, 1);
    }
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_fork) {
    u32 parent = bpf_get_current_pid_tgid() >> 32;
    if (targets.lookup(&parent) == NULL)
        return 0;
    u32 child = args->child_pid;   /* a new thread's tid is harmless: tgids are keys */
    u8 one = 1;
    targets.update(&child, &one);
    struct py_conf_t *c = py_conf.lookup(&parent);
    if (c) {   /* a fork of a Python process is the same interpreter until it execs */
        struct py_conf_t copy = *c;
        py_conf.update(&child, &copy);
    }
    return 0;
}
"""


class PyConf(ctypes.Structure):
    """The ctypes mirror of `struct py_conf_t`."""

    _fields_ = c_mirror.fields(BPF_TEXT, "py_conf_t")


class PyFrameRaw(ctypes.Structure):
    """The ctypes mirror of `struct py_frame_t` (one Python frame of a sample)."""

    _fields_ = c_mirror.fields(BPF_TEXT, "py_frame_t")


class RawSample(ctypes.Structure):
    """The ctypes mirror of `struct sample_t` up to the stack bytes."""

    _fields_ = c_mirror.fields(
        BPF_TEXT,
        "sample_t",
        sizes={"MAX_DEPTH": MAX_DEPTH, "MAX_PY": MAX_PY},
        nested={"py_frame_t": PyFrameRaw},
        until="stack",
    )


def program_text(
    fsbase_offset: int = 0,
    *,
    offcpu: bool = False,
    ncpus: int = 1,
    start_stack: tuple[int, int] = (0, 0),
) -> str:
    """The C text with its constants filled in (bcc's -D flags would work too); with
    `offcpu`, the off-CPU probe's tracepoints too (offcpu_probe.py). `ncpus`: one more
    than the highest possible CPU id (the scratch records are indexed by it);
    `start_stack`: the offsets of task_struct.mm and mm_struct.start_stack (btf.py)."""
    text = BPF_TEXT + (offcpu_probe.OFFCPU_TEXT if offcpu else "")
    for key, value in {
        "__MAX_DEPTH__": MAX_DEPTH,
        "__MAX_PY__": MAX_PY,
        "__MAX_THREADS__": MAX_THREADS,
        "__STACK_PAGES__": STACK_PAGES,
        "__RINGBUF_PAGES__": RINGBUF_PAGES,
        "__FSBASE_OFFSET__": fsbase_offset,
        "__NCPUS__": max(ncpus, 1),
        "__MM_OFFSET__": start_stack[0],
        "__START_STACK_OFFSET__": start_stack[1],
    }.items():
        text = text.replace(key, str(value))
    return text


def load(
    hz: int, fsbase_offset: int = 0, *, offcpu: bool = False, start_stack: tuple[int, int] = (0, 0)
) -> Any:
    """Compile the program and attach it to a CPU_CLOCK perf event on every CPU (bcc
    attaches the tracepoints, the off-CPU probe's among them, by their names).

    `fsbase_offset` is where task_struct keeps the user fs base (from the kernel's BTF);
    only CPython 3.10 needs it. Raises whatever bcc raises; the collector turns it into a
    one-line cause and fix.
    """
    from bcc import BPF, PerfSWConfig, PerfType
    from bcc.utils import get_possible_cpus

    ncpus = max(get_possible_cpus(), default=0) + 1
    text = program_text(fsbase_offset, offcpu=offcpu, ncpus=ncpus, start_stack=start_stack)
    bpf = BPF(text=text.encode())
    bpf.attach_perf_event(
        ev_type=PerfType.SOFTWARE,
        ev_config=PerfSWConfig.CPU_CLOCK,
        fn_name=b"on_cpu_clock",
        sample_freq=hz,
        cpu=-1,
    )
    return bpf
