"""Where the launching thread waited (on-CPU and off-CPU samples), and the three findings
built on it: waiting for work, input pipeline starved, copy-bound; each with the case where
it must not fire."""

from __future__ import annotations

import itertools
from dataclasses import replace

from synth import LOAD, MAIN, MODULE, MS, US, Loop, cpu_samples

from kubeprof.analysis import cpu_samples as cs
from kubeprof.analysis.findings import Kind, Severity, Window, analyse
from kubeprof.model import CpuSample, Frame, FrameKind, GpuActivity, OffCpuSample

WAIT = Frame("wait_for_request", FrameKind.PYTHON, "/app/serve.py", 59)
QUEUE_GET = Frame("Queue.get", FrameKind.PYTHON, "/usr/lib/python3.12/queue.py", 171)
PULL = Frame("next_batch", FrameKind.PYTHON, "/app/train.py", 30)
DL_NEXT = Frame(
    "_BaseDataLoaderIter.__next__",
    FrameKind.PYTHON,
    "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py",
    741,
)
WORKER_LOOP = Frame(
    "_worker_loop",
    FrameKind.PYTHON,
    "/usr/lib/python3/dist-packages/torch/utils/data/_utils/worker.py",
    358,
)
MAKE = Frame("make_sample", FrameKind.PYTHON, "/app/data.py", 219)


def waiting_loop() -> Loop:
    """40 steps of 5 x 1 ms kernels, then 50 ms with nothing queued."""
    return Loop(steps=40, kernels=5, kernel_ns=1 * MS, host_ns=50 * MS).build()


def host_stretches(loop: Loop) -> list[tuple[int, int]]:
    ks = sorted((a.start_ns, a.end_ns) for a in loop.acts if a.kind == "kernel")
    return [(e, s2) for (_, e), (s2, _) in itertools.pairwise(ks) if s2 - e > 10 * MS]


def asleep(loop: Loop) -> list[CpuSample]:
    """The launcher's on-CPU samples with the host stretches left out (it is off CPU)."""
    return [s for s in cpu_samples(loop) if s.tid != loop.pid or LOAD not in s.stack]


def offcpu(loop: Loop, stack: tuple[Frame, ...], reason: str) -> list[OffCpuSample]:
    return [
        OffCpuSample(s, loop.pid, loop.pid, "python", e - s, e - s, reason, "bpf-sched", stack)
        for s, e in host_stretches(loop)
    ]


def test_a_blocked_launcher_without_a_pipeline_is_waiting_for_work():
    loop = waiting_loop()
    cols = cs.from_samples(asleep(loop), hz=1000, source="bpf")
    waits = offcpu(loop, (MODULE, MAIN, WAIT, QUEUE_GET), "futex")
    r = analyse(loop.acts, [], cols, Window(*loop.session), offcpu=waits)
    top = r.findings[0]
    assert top.kind is Kind.WAITING_FOR_WORK and top.severity is Severity.CRITICAL
    assert "wait_for_request (serve.py:59)" in top.message and "futex" in top.message
    assert top.evidence.lines[0] == "/app/serve.py:59 wait_for_request"
    assert "MPS" in top.message and "batch requests" in top.message
    found = {f.kind for f in r.findings}
    assert Kind.GPU_STARVED not in found and Kind.INPUT_STARVED not in found
    assert r.waits is not None and r.waits.offcpu_source == "bpf-sched"


def test_without_off_cpu_samples_it_says_off_cpu_no_stack():
    loop = waiting_loop()
    r = analyse(loop.acts, [], cs.from_samples(asleep(loop), hz=1000), Window(*loop.session))
    top = r.findings[0]
    assert top.kind is Kind.WAITING_FOR_WORK and "off CPU, no stack" in top.message
    assert "wait_for_request" not in top.message


def test_a_launcher_on_cpu_is_starved_not_waiting():
    """Must not fire: the thread computes (load_batch) through the stretches."""
    loop = waiting_loop()
    r = analyse(loop.acts, [], cs.from_samples(cpu_samples(loop), hz=1000), Window(*loop.session))
    found = {f.kind for f in r.findings}
    assert Kind.GPU_STARVED in found
    assert Kind.WAITING_FOR_WORK not in found and Kind.INPUT_STARVED not in found


def workers(loop: Loop, n: int = 4) -> list[CpuSample]:
    """``n`` DataLoader worker processes on CPU in make_sample the whole loop (1 kHz)."""
    return [
        CpuSample(ts + w, 500 + w, 500 + w, "pt_data_worker", 0, (WORKER_LOOP, MAKE))
        for w in range(n)
        for ts in range(loop.loop_start, loop.loop_end, 1 * MS)
    ]


def test_a_launcher_waiting_on_a_busy_dataloader_is_input_starved():
    loop = waiting_loop()
    cols = cs.from_samples([*asleep(loop), *workers(loop)], hz=1000)
    waits = offcpu(loop, (MODULE, MAIN, PULL, DL_NEXT, QUEUE_GET), "futex")
    r = analyse(loop.acts, [], cols, Window(*loop.session), offcpu=waits)
    top = r.findings[0]
    assert top.kind is Kind.INPUT_STARVED and top.severity is Severity.CRITICAL
    assert top.evidence.lines[0] == "/app/train.py:30 next_batch"
    assert "/app/data.py:219 make_sample" in top.evidence.lines
    assert top.evidence.numbers["worker_processes"] == 4
    assert 3 < top.evidence.numbers["worker_cores"] <= 4.5
    assert "num_workers" in top.message and "persistent_workers" in top.message
    assert Kind.WAITING_FOR_WORK not in {f.kind for f in r.findings}


def test_idle_workers_and_a_plain_queue_are_no_input_pipeline():
    """Must not fire: a queue with nobody busy behind it is waiting for work."""
    loop = waiting_loop()
    idle_workers = [s for s in workers(loop) if s.ts_ns % (50 * MS) < 1 * MS]
    cols = cs.from_samples([*asleep(loop), *idle_workers], hz=1000)
    waits = offcpu(loop, (MODULE, MAIN, WAIT, QUEUE_GET), "futex")
    r = analyse(loop.acts, [], cols, Window(*loop.session), offcpu=waits)
    found = {f.kind for f in r.findings}
    assert Kind.INPUT_STARVED not in found and Kind.WAITING_FOR_WORK in found


def copy_loop(copy_ns: int, name: str = "memcpy HtoD (pageable)") -> Loop:
    """60 steps of 4 x 1 ms kernels, one copy of ``copy_ns`` after the fourth."""
    loop = Loop(steps=60, kernels=4, kernel_ns=1 * MS, host_ns=0).build()
    acts = []
    t = 0
    for a in sorted(loop.acts, key=lambda a: a.start_ns):
        a2 = replace(a, start_ns=a.start_ns + t, end_ns=a.end_ns + t)
        acts.append(a2)
        if a.kind == "kernel" and a.correlation_id % 1000 == 3:
            acts.append(
                GpuActivity(
                    "memcpy",
                    name,
                    a2.end_ns,
                    a2.end_ns + copy_ns,
                    0,
                    a.pid,
                    0,
                    bytes=64 << 20,
                    stack=a.stack,
                )
            )
            t += copy_ns
    loop.acts = acts
    loop.loop_end += t
    return loop


def test_copies_taking_most_of_the_device_time_are_copy_bound():
    r = analyse(copy_loop(12 * MS).acts, [], None, Window(*copy_loop(12 * MS).session))
    top = r.findings[0]
    assert top.kind is Kind.COPY_BOUND and top.severity is Severity.CRITICAL
    assert "pageable" in top.message and "pin_memory" in top.message
    assert top.evidence.numbers["HtoD_gbps"] == (64 << 20) / (12 * MS)
    assert top.evidence.lines[0].startswith("/app/train.py:42")
    assert r.headline.ratio is not None and r.headline.ratio < 0.05  # copies are busy time
    pinned = analyse(
        copy_loop(12 * MS, "memcpy HtoD (pinned)").acts,
        [],
        None,
        Window(*copy_loop(12 * MS).session),
    )
    cb = next(f for f in pinned.findings if f.kind is Kind.COPY_BOUND)
    assert cb.gain is None and cb.severity is Severity.INFO  # no pinning to gain


def test_a_small_copy_beside_big_kernels_is_not_copy_bound():
    """Must not fire: the copy is 13 % of the step."""
    loop = copy_loop(600 * US)
    r = analyse(loop.acts, [], None, Window(*loop.session))
    assert Kind.COPY_BOUND not in {f.kind for f in r.findings}
