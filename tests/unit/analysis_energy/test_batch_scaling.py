"""Batch-size guidance on synthetic runs: the knee is found where it was built, and nothing is
claimed when runs or signals are missing."""

from __future__ import annotations

import pytest
from scaling_synth import MS, SynthRun

from kubeprof.analysis import batch_scaling
from kubeprof.analysis.batch_scaling import Run, analyse, run_from_records
from kubeprof.model import GpuActivity

# Throughput doubles with the batch up to 128 (step time flat at 10 ms: launch/host bound),
# then the step time grows with the batch (the GPU is full): samples/s flat from 128.
# GPM: tensor activity overtakes DRAM bandwidth from 64.
KNEE = {
    16: SynthRun(16, 10 * MS, 0.20, gpm=(20.0, 10.0)),
    32: SynthRun(32, 10 * MS, 0.35, gpm=(30.0, 15.0)),
    64: SynthRun(64, 10 * MS, 0.60, gpm=(35.0, 40.0)),
    128: SynthRun(128, 10 * MS, 0.97, gpm=(30.0, 60.0)),
    256: SynthRun(256, 20 * MS, 0.98, gpm=(28.0, 65.0)),
    512: SynthRun(512, 40 * MS, 0.98, gpm=(27.0, 66.0)),
}


def run_of(
    s: SynthRun, name: str | None = None, labels: dict[str, str] | None = None, *, gpm: bool = True
) -> Run:
    labels = {"batch_size": str(s.batch)} if labels is None else labels
    return run_from_records(
        name or f"bs{s.batch}",
        labels,
        s.activities(),
        s.gpm_metrics() if gpm else [],
        s.start_ns,
        s.end_ns,
    )


def test_run_figures_come_from_the_kernel_rhythm_and_the_steady_state():
    r = run_of(KNEE[64])
    assert r.batch_size == 64
    assert r.steps_per_s == pytest.approx(100.0, rel=1e-6)  # 10 ms steps
    assert r.samples_per_s == pytest.approx(6400.0, rel=1e-6)
    assert r.steps_basis.startswith("kernel rhythm:")
    assert r.gpu_busy == pytest.approx(0.60, abs=0.01)
    assert (r.dram_pct, r.tensor_pct, r.sm_pct) == (35.0, 40.0, 90.0)  # loop only, no start-up
    assert r.bound == "compute-bound"
    assert run_of(KNEE[16]).bound == "neither"  # tensor 10 %, DRAM 20 %: neither reaches 30 %


def test_knee_and_plateau_found_where_built():
    s = analyse([run_of(x) for x in KNEE.values()])
    assert s.compute_bound_from == 64
    assert s.bound_basis == "GPM tensor vs DRAM"
    assert s.plateau_from == 128
    assert s.verdicts[0] == (
        "compute-bound from batch 64 (tensor 40 %, DRAM 35 %; at 32: tensor 15 %, DRAM 30 %)"
    )
    assert s.verdicts[1].startswith(
        "throughput stops improving at batch 128: 1.28e+04 samples/s, 1.28e+04 at 512"
    )
    gains = {(a, b): g for a, b, g in s.gains}
    assert gains[(16, 32)] == pytest.approx(1.0, rel=1e-6)  # doubling the batch doubles it
    assert abs(gains[(128, 256)]) < 1e-6
    assert s.missing == ()


def test_plateau_needs_every_later_doubling_below_five_percent():
    runs = [
        Run(f"r{b}", b, sps / b, "given", 0.9, 20.0, 50.0)  # samples/s given
        for b, sps in ((8, 100.0), (16, 103.0), (32, 200.0), (64, 204.0))
    ]
    s = analyse(runs)
    assert s.plateau_from == 32  # 8 -> 16 gained 3 %, but 16 -> 32 doubled again


def test_gains_between_batches_further_apart_are_scaled_to_a_doubling():
    runs = [
        Run("a", 16, 100.0 / 16, "given", 0.9, 20.0, 50.0),
        Run("b", 64, 200.0 / 64, "given", 0.9, 20.0, 50.0),
        Run("c", 256, 216.0 / 256, "given", 0.9, 20.0, 50.0),
    ]  # x1.08 over two doublings
    s = analyse(runs)
    assert s.gains[1][2] == pytest.approx(1.08**0.5 - 1)  # 3.9 % per doubling
    assert s.plateau_from == 64


def test_still_improving_is_not_called_a_plateau():
    runs = [run_of(KNEE[b]) for b in (16, 32, 64)]
    s = analyse(runs)
    assert s.plateau_from is None
    assert s.verdicts[1].startswith(
        "throughput still improves at the largest batch measured: 32 -> 64 gains 100 % per doubling"
    )


def test_already_compute_bound_at_the_smallest_batch_says_so():
    s = analyse([run_of(KNEE[b]) for b in (64, 128, 256)])
    assert s.compute_bound_from == 64
    assert "already at the smallest batch measured, 64" in s.verdicts[0]
    assert "record smaller batches" in s.verdicts[0]


def test_never_compute_bound_is_not_claimed():
    runs = [Run(f"r{b}", b, 100.0, "given", 0.5, 70.0, 20.0) for b in (8, 16, 32)]
    s = analyse(runs)
    assert s.compute_bound_from is None
    assert s.verdicts[0].startswith("compute-bound: not at any batch measured, up to 32")
    assert runs[0].bound == "memory-bound"


def test_too_few_sessions_claim_nothing():
    s = analyse([run_of(KNEE[32]), run_of(KNEE[64])])
    assert s.compute_bound_from is None and s.plateau_from is None and s.gains == ()
    assert s.verdicts == (
        "no verdict: 2 batch size(s) with throughput; at least 3 are needed "
        "(record the workload at more batch sizes, each with "
        "--label batch_size=N)",
    )


def test_repeated_batch_size_does_not_count_twice():
    s = analyse([run_of(KNEE[32], "a"), run_of(KNEE[32], "b"), run_of(KNEE[64])])
    assert s.verdicts[0].startswith("no verdict: 2 batch size(s)")


def test_without_gpm_only_saturation_is_claimed_and_the_gap_is_named():
    s = analyse([run_of(x, gpm=False) for x in KNEE.values()])
    assert s.bound_basis == "GPU busy (saturation only)"
    assert s.compute_bound_from == 128  # busy >= 95 % from 128
    assert s.verdicts[0].startswith(
        "GPU-saturated from batch 128 (GPU busy 97 %; at 64: GPU busy 60 %)"
    )
    assert "compute- vs memory-bound is not known" in s.verdicts[0]
    assert not any(v.startswith("compute-bound from") for v in s.verdicts)
    assert len(s.missing) == len(KNEE)
    assert all("no GPM DRAM/tensor counters" in m for m in s.missing)
    assert s.plateau_from == 128  # throughput needs no counters


def test_one_run_without_gpm_means_no_gpm_verdict():
    runs = [run_of(KNEE[b]) for b in (16, 32)] + [run_of(KNEE[64], gpm=False)]
    s = analyse(runs)
    assert s.bound_basis == "GPU busy (saturation only)"
    assert s.missing == (
        "bs64: no GPM DRAM/tensor counters (NVML GPM needs a Hopper-class GPU "
        "or newer, sampled during the steady state)",
    )


def test_no_batch_label_or_no_kernels_is_named_and_left_out():
    unlabelled = run_of(KNEE[32], "nolabel", labels={})
    empty = run_from_records("nogpu", {"batch_size": "64"}, [], [], 0, 10 * MS)
    s = analyse([unlabelled, empty, run_of(KNEE[16])])
    assert unlabelled.batch_size is None and unlabelled.samples_per_s is None
    assert empty.steps_per_s is None and empty.gpu_busy is None
    assert "nolabel: no batch_size label (record with --label batch_size=N)" in s.missing
    assert any(m.startswith("nogpu: no steps/s") for m in s.missing)
    assert any(m.startswith("nogpu: no GPU busy share") for m in s.missing)
    assert [r.name for r in s.runs] == ["bs16"]
    assert s.verdicts[0].startswith("no verdict: 1 batch size(s)")


def test_steps_label_when_no_kernel_recurs():
    # kernels of ever-changing names at irregular times: no rhythm of any device work (a
    # regular 10 ms beat of any kernels is a rhythm now that busy means any engine); the
    # steps label gives steps/s
    gaps = [2 + (i * i * 37) % 50 for i in range(49)]  # 2-51 ms, no period
    starts = [1000 * MS + MS * sum(gaps[:i]) for i in range(50)]
    acts = [GpuActivity("kernel", f"k{i}", t, t + MS, 0, 1, i) for i, t in enumerate(starts)]
    r = run_from_records("x", {"batch_size": "8", "steps": "49"}, acts, [], 0, 2000 * MS)
    # the active window: first kernel start to last kernel end
    assert r.steps_per_s == pytest.approx(49 / ((max(starts) + MS - min(starts)) / 1e9))
    assert r.steps_basis.startswith("steps label: 49 steps over the active window")
    no_label = run_from_records("x", {"batch_size": "8"}, acts, [], 0, 2000 * MS)
    assert no_label.steps_per_s is None


def test_bad_labels_are_ignored_not_guessed():
    r = run_from_records("x", {"batch_size": "sixty-four", "steps": "-3"}, [], [], 0, MS)
    assert r.batch_size is None and r.steps_per_s is None
    assert batch_scaling.BATCH_LABEL == "batch_size"
