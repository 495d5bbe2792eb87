"""Golden and must-not-fire tests per finding, on synthetic traces with a known cause."""

from __future__ import annotations

from dataclasses import replace

import pytest
from synth import ELEMENTWISE, GEMM, MS, US, Frame, FrameKind, Loop, gpm

from kubeprof.analysis.findings import Kind, Severity, Window, analyse
from kubeprof.model import GpuActivity

ITEM_LINE = Frame("train_step", FrameKind.PYTHON, "/app/train.py", 57)


def kinds(loop: Loop, metrics=()) -> dict[str, object]:
    r = analyse(loop.acts, list(metrics), None, Window(*loop.session))
    return {f.kind: f for f in r.findings}


def compute_loop() -> Loop:
    return Loop(steps=60, kernels=10, kernel_ns=2 * MS, gap_ns=3 * US).build()


def test_healthy_compute_bound_loop_is_neither_starved_nor_launch_bound():
    found = kinds(compute_loop())
    for k in (
        Kind.GPU_STARVED,
        Kind.LAUNCH_BOUND,
        Kind.SYNC_STALL,
        Kind.FUSION,
        Kind.PAGEABLE_MEMCPY,
    ):
        assert k not in found
    assert found[Kind.KERNEL_BOUND].severity is Severity.INFO
    assert "compute-bound" in found[Kind.KERNEL_BOUND].message


def test_starved_loop_fires_starved_with_gain_and_not_launch_bound():
    loop = Loop(steps=40, kernels=10, kernel_ns=1 * MS, host_ns=90 * MS).build()
    found = kinds(loop)
    f = found[Kind.GPU_STARVED]
    assert f.severity is Severity.CRITICAL
    assert f.evidence.numbers["steady_idle"] > 0.85
    assert f.evidence.numbers["long_gaps_per_step"] == pytest.approx(1.0, abs=0.05)
    assert f.gain is not None and 0.85 < f.gain.share < 0.95 and f.gain.model
    assert Kind.LAUNCH_BOUND not in found


def tiny_loop(frame: Frame | None = None) -> Loop:
    """60 tiny elementwise ops per step, each launch slower than the kernel (250 steps: a
    window over the 0.2 s minimum for a verdict)."""
    loop = Loop(
        steps=250,
        kernels=60,
        kernel_ns=3 * US,
        gap_ns=12 * US,
        host_ns=100 * US,
        kernel_name=ELEMENTWISE,
    )
    if frame is not None:
        loop.step_frame = frame
    return loop.build()


def test_tiny_kernels_fire_launch_bound_and_fusion():
    found = kinds(tiny_loop())
    lb = found[Kind.LAUNCH_BOUND]
    assert lb.evidence.numbers["kernels_per_step"] == pytest.approx(60, rel=0.05)
    assert lb.evidence.numbers["median_kernel_us"] == pytest.approx(3, rel=0.1)
    assert lb.evidence.numbers["median_gap_us"] == pytest.approx(12, rel=0.1)
    assert "CUDA graph" in lb.message
    fu = found[Kind.FUSION]
    assert "train_step" in fu.message and fu.evidence.lines[0].startswith("/app/train.py:42")
    assert fu.gain is not None and fu.gain.share > 0.5
    assert Kind.GPU_STARVED not in found


def test_fusion_needs_short_elementwise_kernels_from_one_frame():
    loop = Loop(steps=50, kernels=60, kernel_ns=3 * US, gap_ns=12 * US, kernel_name=GEMM).build()
    assert Kind.FUSION not in kinds(loop)  # GEMMs are not fused like elementwise ops
    lib = Frame("forward", FrameKind.PYTHON, "/usr/lib/python3/site-packages/torch/nn/x.py", 1)
    alternating = tiny_loop()
    acts = [
        replace(a, stack=(*a.stack[:2], lib if i % 2 else a.stack[2], a.stack[-1]))
        for i, a in enumerate(alternating.acts)
    ]
    alternating.acts = acts  # every other kernel from another frame: no runs of 3
    assert Kind.FUSION not in kinds(alternating)


def item_loop(*, with_copy: bool = True) -> Loop:
    """A small matmul then .item() each iteration: DtoH copy, host sync, host relaunch."""
    loop = Loop(steps=4000, kernels=1, kernel_ns=15 * US, gap_ns=0)  # ~0.24 s of steps
    loop.step_frame = ITEM_LINE
    loop.build()
    acts = []
    for a in loop.acts:
        acts.append(a)
        if a.kind == "kernel" and a.name == GEMM:
            e = a.end_ns
            if with_copy:
                acts.append(
                    GpuActivity(
                        "memcpy",
                        "memcpy DtoH (pageable)",
                        e + 2 * US,
                        e + 4 * US,
                        0,
                        a.pid,
                        a.correlation_id,
                        bytes=4,
                        stack=a.stack,
                    )
                )
            acts.append(GpuActivity("sync", "stream_sync", a.start_ns, e + 5 * US, 0, a.pid, 0))
    # the host relaunches 40 µs after each sync
    shifted, t = [], 0
    for a in sorted(acts, key=lambda a: a.start_ns):
        if a.kind == "kernel" and a.name == GEMM:
            t += 40 * US
        shifted.append(replace(a, start_ns=a.start_ns + t, end_ns=a.end_ns + t))
    loop.acts = shifted
    loop.loop_end += t
    return loop


def test_item_after_small_kernels_fires_sync_stall_with_the_python_line():
    found = kinds(item_loop())
    f = found[Kind.SYNC_STALL]
    assert f.evidence.numbers["stalls_per_step"] == pytest.approx(1.0, abs=0.1)
    assert f.evidence.numbers["median_kernel_before_us"] == pytest.approx(15, rel=0.1)
    assert f.evidence.lines and f.evidence.lines[0].startswith("/app/train.py:57")
    assert "train.py" in f.message
    assert Kind.LAUNCH_BOUND not in found  # the gaps are the syncs', not launches'
    assert Kind.GPU_STARVED not in found


def test_sync_stall_does_not_fire_without_syncs():
    loop = item_loop(with_copy=False)
    loop.acts = [a for a in loop.acts if a.kind != "sync"]
    assert Kind.SYNC_STALL not in kinds(loop)


def copy_loop(name: str) -> Loop:
    loop = Loop(steps=60, kernels=4, kernel_ns=1 * MS, host_ns=0).build()
    acts = []
    for a in loop.acts:
        acts.append(a)
        if a.kind == "kernel" and a.correlation_id % 1000 == 3:
            acts.append(
                GpuActivity(
                    "memcpy",
                    name,
                    a.end_ns,
                    a.end_ns + 600 * US,
                    0,
                    a.pid,
                    0,
                    bytes=6 << 20,
                    stack=a.stack,
                )
            )
    loop.acts = acts
    return loop


def test_pageable_memcpy_fires_on_pageable_only():
    f = kinds(copy_loop("memcpy HtoD (pageable)"))[Kind.PAGEABLE_MEMCPY]
    assert f.evidence.numbers["HtoD_copies"] >= 35
    assert f.evidence.numbers["HtoD_gbps"] == pytest.approx((6 << 20) / 600_000, rel=0.01)
    assert f.gain is not None and "2x" in f.gain.model
    assert Kind.PAGEABLE_MEMCPY not in kinds(copy_loop("memcpy HtoD (pinned)"))
    assert Kind.PAGEABLE_MEMCPY not in kinds(copy_loop("memcpy HtoD"))  # unknown: no verdict


def test_memory_vs_compute_bound_from_measured_gpm():
    loop = compute_loop()
    mem = kinds(loop, gpm(loop, dram=80, tensor=5))[Kind.KERNEL_BOUND]
    assert "memory-bound by GPM" in mem.message
    assert mem.evidence.numbers["gpm_dram_bw_pct"] == pytest.approx(80)
    comp = kinds(loop, gpm(loop, dram=20, tensor=70))[Kind.KERNEL_BOUND]
    assert "compute-bound by GPM" in comp.message


def test_findings_are_ordered_most_severe_first():
    r = analyse(tiny_loop().acts, [], None, Window(*tiny_loop().session))
    ranks = ["critical", "warning", "info"]
    order = [ranks.index(f.severity) for f in r.findings]
    assert order == sorted(order) and len(order) >= 2


def test_a_window_under_the_minimum_gives_no_verdict_and_says_why():
    """The same tiny-op loop over 0.01 s (a burst of requests) is no ground for a finding."""
    loop = Loop(
        steps=12,
        kernels=60,
        kernel_ns=3 * US,
        gap_ns=12 * US,
        host_ns=100 * US,
        kernel_name=ELEMENTWISE,
    ).build()
    r = analyse(loop.acts, [], None, Window(*loop.session))
    assert r.findings == ()
    assert r.verdict.startswith("no verdict") and "0.2 s" in r.verdict and "10 steps" in r.verdict
    assert r.headline.ratio is not None  # the figure stays, with its window


def test_no_finding_is_critical_or_warning_without_time_at_stake():
    from kubeprof.analysis.findings.model import Evidence, Finding, Gain
    from kubeprof.analysis.findings.stake import capped

    def f(saved_ns: int, share: float) -> Finding:
        return Finding(
            Kind.LAUNCH_BOUND, Severity.CRITICAL, "m", Evidence(), Gain(saved_ns, share, "x")
        )

    assert capped(f(0, 0.0)).severity is Severity.INFO
    assert capped(f(4 * MS, 0.8)).severity is Severity.INFO  # a big share of a tiny window
    assert capped(f(2_000 * MS, 0.01)).severity is Severity.INFO  # seconds, but 1 % of it
    assert capped(f(50 * MS, 0.2)).severity is Severity.WARNING
    assert capped(f(2_000 * MS, 0.6)).severity is Severity.CRITICAL
    no_gain = Finding(Kind.FUSION, Severity.WARNING, "m", Evidence(), None)
    assert capped(no_gain).severity is Severity.INFO
