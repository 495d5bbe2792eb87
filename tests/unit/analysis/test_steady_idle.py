"""The headline idle figure: steady state found from the loop's rhythm, agreeing with the
loop's own truth; phases shown apart; a timeline that adds up; no figure without data."""

from __future__ import annotations

import itertools

import pytest
from synth import MS, US, Loop

from kubeprof.analysis import gpu_trace, phases, steady_idle
from kubeprof.analysis.findings import Window, analyse
from kubeprof.model import GpuActivity


def run(loop: Loop):
    s0, s1 = loop.session
    return analyse(loop.acts, [], None, Window(s0, s1))


@pytest.mark.parametrize(
    ("kernel_ns", "host_ns"),
    [(2 * MS, 0), (1 * MS, 20 * MS), (1 * MS, 180 * MS), (20 * US, 2 * MS), (300 * US, 0)],
    ids=["compute", "half", "starved", "short-kernels", "one-kernel-steps"],
)
def test_headline_agrees_with_the_loops_own_truth(kernel_ns, host_ns):
    kernels = 1 if kernel_ns == 300 * US else 10
    loop = Loop(steps=60, kernels=kernels, kernel_ns=kernel_ns, host_ns=host_ns).build()
    result = run(loop)
    assert result.headline.ratio is not None
    assert abs(result.headline.ratio - loop.truth) < 0.05, (result.headline, loop.truth)
    assert result.phases.steps >= 50


def test_start_up_and_warm_up_are_shown_apart_not_in_the_headline():
    loop = Loop(steps=60, kernel_ns=2 * MS, startup_ns=20_000 * MS).build()
    r = run(loop)
    assert r.headline.ratio is not None and r.headline.ratio < 0.05
    assert r.figures.session.ratio is not None and r.figures.session.ratio > 0.7
    assert r.phases.startup.duration_ns == 20_000 * MS
    assert r.figures.warmup.ratio is not None and r.figures.warmup.ratio > 0.5
    # steady state starts within one step of the loop's first warm step
    step = loop.kernels * (loop.kernel_ns + loop.gap_ns)
    assert abs(r.phases.steady.start_ns - loop.loop_start) <= 1.5 * step


def test_autotuning_that_recurs_regularly_is_not_taken_for_the_loop():
    loop = Loop(steps=40, kernel_ns=2 * MS).build()
    t = loop.t0 + 100 * MS
    extra = []
    for i in range(400):  # a redzone check before each of many different candidates
        extra.append(loop.kernel(t, 30 * US, "RedzoneAllocatorKernel"))
        extra.append(loop.kernel(t + 100 * US, (1 + i % 7) * 300 * US, f"candidate_{i}"))
        t += 5 * MS
    acts = extra + [a for a in loop.acts if a.start_ns > t]
    s0, s1 = loop.session
    r = analyse(acts, [], None, Window(s0, s1))
    assert r.phases.anchor != "RedzoneAllocatorKernel"
    assert r.headline.ratio is not None and r.headline.ratio < 0.05


def test_without_a_rhythm_the_active_window_is_used_and_said():
    loop = Loop()
    acts = [loop.kernel(loop.t0 + i * 7 * MS * (i % 3 + 1), MS, f"k{i}") for i in range(5)]
    r = analyse(acts, [], None, Window(loop.t0, loop.t0 + 10_000 * MS))
    assert "active window" in r.phases.method
    assert r.headline.ratio is not None and 0 < r.headline.ratio < 1


def test_no_device_work_gives_no_figure_but_a_reason():
    r = analyse([], [], None, Window(0, 10 * MS))
    assert r.headline.ratio is None and "no kernels, copies or memsets" in r.headline.reason
    assert r.findings == () and r.breakdown is None


def test_copies_keep_the_device_busy():
    """A loop whose GPU work is one copy a step is busy while it copies, not 100 % idle."""
    loop = Loop()
    acts = []
    t = loop.t0
    for _ in range(60):  # 9 ms copy, 1 ms host gap
        acts.append(GpuActivity("memcpy", "memcpy HtoD (pageable)", t, t + 9 * MS, 0, 1, 1))
        t += 10 * MS
    r = analyse(acts, [], None, Window(loop.t0 - 100 * MS, t + 100 * MS))
    h = r.headline
    assert h.ratio is not None and abs(h.ratio - 0.1) < 0.02, h
    assert h.kernel_busy == 0 and h.copy_busy is not None and abs(h.copy_busy - 0.9) < 0.02
    assert r.phases.steps >= 50 and r.phases.anchor == "memcpy HtoD (pageable)"


def test_tracer_off_says_why():
    loop = Loop(steps=10).build()
    r = analyse(
        loop.acts,
        [],
        None,
        Window(*loop.session),
        gpu_traced=False,
        untraced_reason="No module named 'elftools'",
    )
    assert r.headline.ratio is None and "elftools" in r.headline.reason
    assert all(f.ratio is None for f in (r.figures.session, r.figures.warmup))


def test_timeline_buckets_add_up_to_the_session_figure():
    loop = Loop(steps=30, host_ns=30 * MS).build()
    r = run(loop)
    tl = r.timeline
    assert tl.bucket_ns == steady_idle.BUCKET_NS
    assert sum(tl.busy_ns) == r.figures.session.busy_ns
    assert len(tl.busy_ns) == -(-r.phases.session.duration_ns // tl.bucket_ns)
    assert all(0.0 <= (tl.idle_ratio(i) or 0) <= 1.0 for i in range(len(tl.busy_ns)))


def test_phases_tile_the_session():
    loop = Loop(steps=30).build()
    trace = gpu_trace.build(loop.acts)
    ph = phases.detect(trace, Window(*loop.session))
    ws = [ph.startup, ph.warmup, ph.steady, ph.tail]
    assert ws[0].start_ns == ph.session.start_ns and ws[-1].end_ns == ph.session.end_ns
    assert all(a.end_ns == b.start_ns for a, b in itertools.pairwise(ws))


def test_indexed_busy_time_equals_clipping_on_random_windows():
    import random

    from kubeprof.analysis.gpu_timeline import clip, total

    rng = random.Random(7)
    acts = []
    t = 0
    for _ in range(500):
        t += rng.randint(0, 50)
        acts.append(GpuActivity("kernel", "k", t, t + rng.randint(1, 80), rng.randint(0, 1), 1, 0))
    trace = gpu_trace.build(acts)
    for _ in range(300):
        a = rng.randint(-100, t + 100)
        b = a + rng.randint(0, 3000)
        want = sum(total(clip(iv, a, b)) for iv in trace.busy.values())
        assert trace.busy_ns(a, b) == want, (a, b)
        idle = trace.idle(a, b)
        assert sum(total(v) for v in idle.values()) == (b - a) * len(trace.busy) - want


def test_one_kernel_autotuned_in_many_configurations_is_not_the_loop():
    loop = Loop(steps=40, kernel_ns=2 * MS).build()
    t = loop.t0 + 100 * MS
    tune = []
    for i in range(30):  # one fusion tried in 30 launch configurations, each repeated
        for _ in range(6):
            k = loop.kernel(t, (1 + i % 5) * 2 * MS, "gemm_fusion_dot_1")
            tune.append(
                GpuActivity(
                    **{**{f: getattr(k, f) for f in k.__slots__}, "grid": (64 * (i + 1), 1, 1)}
                )
            )
            t += 20 * MS
    acts = tune + [a for a in loop.acts if a.start_ns > t]
    r = analyse(acts, [], None, Window(*loop.session))
    assert r.phases.anchor != "gemm_fusion_dot_1"
    assert r.headline.ratio is not None and r.headline.ratio < 0.05


def test_a_claimed_span_of_years_is_bucketed_in_bounded_memory():
    """A hostile or broken record claiming a huge span must not allocate a slot per 100 ms."""
    year = 365 * 24 * 3600 * 1_000_000_000
    acts = [
        GpuActivity("kernel", "k", 0, MS, 0, 1, 0),
        GpuActivity("kernel", "k", 50 * year, 50 * year + MS, 0, 1, 0),
    ]
    trace = gpu_trace.build(acts)
    tl = steady_idle.timeline(trace, Window(0, 100 * year))
    assert len(tl.busy_ns) <= steady_idle.MAX_BUCKETS
    assert tl.bucket_ns % steady_idle.BUCKET_NS == 0
    assert len(tl.busy_ns) * tl.bucket_ns >= 100 * year
    assert sum(tl.busy_ns) == 2 * MS
    r = analyse(acts, [], None, Window(0, 100 * year))
    assert len(r.timeline.busy_ns) <= steady_idle.MAX_BUCKETS
    assert sum(r.timeline.busy_ns) == r.figures.session.busy_ns


def _marks(loop: Loop, name: str, every: int) -> list[GpuActivity]:
    """Host-side NVTX ranges from every ``every``-th kernel of the loop to the next one."""
    ks = sorted((a for a in loop.acts if a.start_ns >= loop.loop_start), key=lambda a: a.start_ns)
    firsts = [ks[i].start_ns for i in range(0, len(ks), every)]
    return [
        GpuActivity("nvtx", name, a - 5 * US, b - 10 * US, -1, loop.pid, 0)
        for a, b in itertools.pairwise(firsts)
    ]


def test_the_programs_step_marks_anchor_the_steps():
    loop = Loop(steps=60, kernels=10, kernel_ns=1 * MS, host_ns=20 * MS).build()
    acts = [*loop.acts, *_marks(loop, "train_step", 10), *_marks(loop, "layer", 2)]
    r = analyse(acts, [], None, Window(*loop.session))
    assert r.phases.anchor == "train_step" and "`train_step`" in r.phases.method
    assert r.phases.steps >= 55  # not the per-layer range, which recurs within a step
    assert abs(r.phases.steady.start_ns - loop.loop_start) <= 30 * MS
    assert r.headline.ratio is not None and abs(r.headline.ratio - loop.truth) < 0.05


def test_marks_over_no_device_work_are_not_the_loop():
    loop = Loop(steps=60, kernels=10, kernel_ns=1 * MS, host_ns=20 * MS).build()
    t = loop.loop_end + 1_000 * MS
    idle_marks = [
        GpuActivity("nvtx", "poll", t + i * 10 * MS, t + i * 10 * MS + MS, -1, 1, 0)
        for i in range(50)
    ]
    acts = [*loop.acts, *idle_marks, loop.kernel(t + 600 * MS, MS, "late")]
    r = analyse(acts, [], None, Window(loop.t0, t + 700 * MS))
    assert r.phases.anchor != "poll"
