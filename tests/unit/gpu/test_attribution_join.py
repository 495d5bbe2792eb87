"""The kernel <-> launch-stack join through the tracer and the receiver (fake CUPTI):
interleaved launches from two Python call sites, and GPU time that has no Python stack."""

from __future__ import annotations

from fake_cupti import FakeCupti

from kubeprof.agent.gpu.tracer import CuptiTracer, TracerConfig
from kubeprof.analysis.gpu_attribution import UNATTRIBUTED, attribution, gpu_stacks
from kubeprof.model import FrameKind


def site_a(fk: FakeCupti) -> int:
    return fk.launch("_Z6kernelv", duration=1000)


def site_b(fk: FakeCupti) -> int:
    return fk.launch("_Z6kernelv", duration=3000)  # same kernel, same API, another line


def _site(stack) -> str:
    names = [f.name for f in stack if f.kind is FrameKind.PYTHON]
    return "a" if "site_a" in names else "b" if "site_b" in names else "?"


def test_interleaved_launches_from_two_sites_are_each_charged_to_their_own(fake, wire):
    rx, tx = wire
    tr = CuptiTracer(tx, TracerConfig(kinds=("kernel",)))
    tr.start()
    tx.start()
    expected = {}
    for i in range(300):  # a b b a b a a b ...: no site owns a run of ids
        which = "ab"[bin(i).count("1") % 2]
        corr = (site_a if which == "a" else site_b)(fake)
        expected[corr] = which
    tr.stop()
    acts = rx.stop(2.0).gpu_activities
    assert len(acts) == 300
    assert {a.correlation_id: _site(a.stack) for a in acts} == expected
    assert len({a.stack[-1].name for a in acts}) == 1  # one API (the runtime launch) for both
    # GPU time per site: b's kernels take 3x as long
    per_site = {"a": 0, "b": 0}
    for w in gpu_stacks(acts):
        per_site[_site(w.stack)] += w.value_ns
    n_a = sum(1 for v in expected.values() if v == "a")
    assert per_site == {"a": 1000 * n_a, "b": 3000 * (300 - n_a)}


def test_gpu_time_without_a_python_stack_is_kept_and_counted(fake, wire):
    """Kernels from a thread with no Python frames (foreign=none) and kernels whose launch
    was never seen (activity only) reach the report, under [unattributed]."""
    rx, tx = wire
    tr = CuptiTracer(tx, TracerConfig(kinds=("kernel",), foreign="none"))
    tr.start()
    tx.start()
    for _ in range(10):
        site_a(fake)  # 10 x 1000 ns with a stack
    fake.native_thread = True
    for _ in range(5):
        fake.launch("_Z6nativev", duration=7000)  # 5 x 7000 ns: no Python stack
    fake.native_thread = False
    tr.pause()  # callbacks off, activity too: then on again without callbacks
    tr.config = TracerConfig(kinds=("kernel",), callbacks=False)
    tr.resume()
    for _ in range(4):
        fake.launch("_Z6unseenv", duration=11000)  # 4 x 11000 ns: launch never recorded
    tr.stop()
    batch = rx.stop(2.0)
    acts = batch.gpu_activities
    assert sorted(a.name for a in acts) == sorted(
        ["_Z6kernelv"] * 10 + ["_Z6nativev"] * 5 + ["_Z6unseenv"] * 4
    )
    assert batch.counters["gpu_kernels"] == 19
    assert batch.counters["gpu_unattributed_kernels"] == 4  # no launch record at all
    att = attribution(acts)
    assert (att.total_ns, att.attributed_ns) == (10_000 + 35_000 + 44_000, 10_000)
    assert (att.count, att.attributed_count) == (19, 10)
    assert att.share == 10_000 / 89_000
    stacks = gpu_stacks(acts)
    assert sum(w.value_ns for w in stacks) == 89_000
    unattributed = [w for w in stacks if w.stack[0] == UNATTRIBUTED]
    assert sum(w.value_ns for w in unattributed) == 79_000
    assert sum(w.samples for w in unattributed) == 9
