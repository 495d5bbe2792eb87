"""Idle breakdown (host / sync / copy / launch / other) and CPU stacks during GPU idle."""

from __future__ import annotations

from synth import DECODE, LOAD, MS, US, Loop, cpu_samples

from kubeprof.analysis import cpu_samples as cs
from kubeprof.analysis import gpu_trace, idle_breakdown
from kubeprof.analysis.findings import Window, analyse
from kubeprof.analysis.phases import Window as W
from kubeprof.model import GpuActivity


def test_categories_add_up_and_land_where_the_records_say():
    k = lambda s, e: GpuActivity("kernel", "k", s, e, 0, 1, 0)  # noqa: E731
    acts = [
        k(0, 100),
        k(105, 200),  # 5 ns gap: launch overhead
        GpuActivity("sync", "stream_sync", 150, 400, 0, 1, 0),
        k(400, 500),  # 200 ns sync
        GpuActivity("memcpy", "memcpy HtoD (pageable)", 520, 700, 0, 1, 0),
        k(700, 800),
        k(900_000, 900_100),  # a long host gap
    ]
    trace = gpu_trace.build(acts)
    bd = idle_breakdown.breakdown(trace, W(0, 900_100))
    assert bd.idle_ns == 900_100 - trace.busy_ns(0, 900_100)
    assert bd.sync_ns + bd.launch_ns + bd.host_ns == bd.idle_ns
    # the copy keeps the device busy: it is no idle time (520..700 is busy)
    assert trace.busy_ns(520, 700) == 180
    assert bd.sync_ns == 200 and bd.launch_ns == 5 + 20
    assert bd.host_ns == 900_000 - 800
    assert bd.host_on_cpu_ns is None and "other" not in bd.shares()
    assert abs(sum(bd.shares().values()) - 1) < 1e-9


def test_host_splits_into_on_cpu_and_other_with_samples():
    loop = Loop(steps=40, kernels=5, kernel_ns=1 * MS, host_ns=20 * MS).build()
    samples = cpu_samples(loop)
    # the thread sleeps half of each host stretch: drop those samples
    awake = [
        s
        for s in samples
        if s.tid != loop.pid or s.stack[-1] not in (LOAD, DECODE) or s.ts_ns % 2_000_000 < 1_000_000
    ]
    r = analyse(loop.acts, [], cs.from_samples(awake, hz=1000), Window(*loop.session))
    bd = r.breakdown
    assert bd is not None and bd.host_on_cpu_ns is not None
    on_cpu = bd.host_on_cpu_ns / bd.host_ns
    assert 0.4 < on_cpu < 0.6, on_cpu
    assert bd.other_ns == bd.host_ns - bd.host_on_cpu_ns


def test_cpu_during_idle_names_the_launching_threads_frame():
    loop = Loop(steps=40, kernels=5, kernel_ns=1 * MS, host_ns=20 * MS).build()
    cols = cs.from_samples(cpu_samples(loop), hz=1000, source="py-spy")
    r = analyse(loop.acts, [], cols, Window(*loop.session))
    cpu = r.cpu_during_idle
    assert cpu is not None and cpu.source == "py-spy"
    assert cpu.tid == loop.pid  # not the logger thread, which has more varied samples
    assert cpu.hot is not None and cpu.hot.frame == LOAD and cpu.hot.share > 0.9
    assert cpu.leaves[0].frame == LOAD and 0.6 < cpu.leaves[0].share < 0.85
    assert cpu.on_cpu_share is not None and cpu.on_cpu_share > 0.8
    starved = [f for f in r.findings if f.kind == "gpu_starved"]
    assert starved and "load_batch (data.py:12)" in starved[0].message


def test_launching_thread_is_found_by_the_launch_stacks_root_not_by_tid():
    loop = Loop(steps=20, kernels=5, kernel_ns=1 * MS, host_ns=5 * MS).build()
    samples = [
        s.__class__(s.ts_ns, s.pid, 555 if s.tid == loop.pid else s.tid, s.thread, s.cpu, s.stack)
        for s in cpu_samples(loop)
    ]
    cols = cs.from_samples(samples, hz=1000)
    trace = gpu_trace.build(loop.acts)
    from kubeprof.analysis.cpu_during_idle import launching_thread

    t = launching_thread(cols, trace, Window(*loop.session))
    assert t is not None and t.tid == 555


def test_no_samples_of_the_gpu_process_says_so():
    loop = Loop(steps=20, kernels=5, host_ns=5 * MS).build()
    foreign = [s.__class__(s.ts_ns, 9, 9, "x", 0, s.stack) for s in cpu_samples(loop)]
    r = analyse(loop.acts, [], cs.from_samples(foreign, hz=1000), Window(*loop.session))
    assert r.cpu_during_idle is None and "launching process" in r.cpu_note
    assert r.breakdown is not None and r.breakdown.host_on_cpu_ns is None


def test_sample_columns_span_is_half_open():
    cols = cs.from_samples([], hz=99)
    assert cols.threads == () and abs(cols.period_ns - 1e9 / 99) < 1
    from array import array

    t = cs.ThreadSamples(1, 1, "t", array("q", [10, 20, 30]), array("q", [0, 0, 0]))
    assert t.span(10, 30) == (0, 2) and t.span(31, 40) == (3, 3)
    assert US == 1000
