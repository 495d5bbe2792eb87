"""Batch-size guidance: throughput and boundness across runs of one workload.

Each run (a session at one batch size) gives steps per second, GPU busy share of the steady
state and the mean device-wide GPM DRAM-bandwidth and tensor-core activity. Over the runs,
sorted by batch size:

- **compute-bound from**: the smallest batch from which every larger run is compute-bound:
  tensor-core activity >= TENSOR_PCT and at least the DRAM-bandwidth utilisation (the
  same reading as the kernel-boundness finding). Without GPM counters a run cannot be
  called compute- or memory-bound; the GPU busy share then says only whether the GPU is
  *saturated* (busy >= SATURATED), and the verdict says that is what it rests on.
- **throughput stops improving at**: the smallest batch from which every larger run gains
  less than MIN_GAIN in samples/s per doubling of the batch (gains between batch sizes that
  are not a doubling apart are scaled to one: ``ratio ** (1 / log2(b2 / b1)) - 1``).

Fewer than MIN_RUNS distinct batch sizes give no verdict; every missing signal is named.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from kubeprof.analysis import gpu_trace, phases
from kubeprof.model import GpuActivity, GpuMetricSample

MIN_RUNS = 3  # distinct batch sizes needed before anything is claimed
MIN_GAIN = 0.05  # samples/s gain per doubling below which throughput has stopped improving
TENSOR_PCT = 30.0  # tensor-core activity from which a run is compute-bound
SATURATED = 0.95  # GPU busy share of the steady state from which the GPU is saturated
BATCH_LABEL = "batch_size"
STEPS_LABEL = "steps"  # optional: the number of steps the run made, when the rhythm is unclear


@dataclass(frozen=True, slots=True)
class Run:
    """What one session says about throughput and boundness."""

    name: str
    batch_size: int | None  # from the session's ``batch_size`` label
    steps_per_s: float | None
    steps_basis: str  # how steps/s was found, in words ("" when not found)
    gpu_busy: float | None  # kernel-busy share of the steady state (mean over devices)
    dram_pct: float | None  # mean GPM DRAM-bandwidth utilisation over the steady state
    tensor_pct: float | None  # mean GPM tensor-core activity over the steady state
    sm_pct: float | None = None  # mean GPM SM activity (shown, not used for the verdict)

    @property
    def samples_per_s(self) -> float | None:
        if self.batch_size is None or self.steps_per_s is None:
            return None
        return self.steps_per_s * self.batch_size

    @property
    def bound(self) -> str | None:
        """ "compute-bound", "memory-bound" or "neither" from GPM; None without GPM."""
        if self.tensor_pct is None or self.dram_pct is None:
            return None
        if self.tensor_pct >= TENSOR_PCT and self.tensor_pct >= self.dram_pct:
            return "compute-bound"
        if self.dram_pct > self.tensor_pct and self.dram_pct >= TENSOR_PCT:
            return "memory-bound"
        return "neither"

    @property
    def saturated(self) -> bool | None:
        return None if self.gpu_busy is None else self.gpu_busy >= SATURATED


def run_from_records(
    name: str,
    labels: Mapping[str, str],
    activities: Sequence[GpuActivity],
    metrics: Sequence[GpuMetricSample],
    start_ns: int,
    end_ns: int,
) -> Run:
    """A Run from a session's records: the step rhythm of its kernels, busy share, GPM means."""
    batch = _positive_int(labels.get(BATCH_LABEL))
    trace = gpu_trace.build(activities)
    ph = phases.detect(trace, phases.Window(start_ns, end_ns))
    steady = ph.steady
    steps_per_s, basis = None, ""
    if ph.loop and ph.steps > 0 and ph.step_ns > 0:  # bursts without a loop are not steps
        steps_per_s = 1e9 / ph.step_ns
        basis = f"kernel rhythm: {ph.steps} steps, median period {ph.step_ns / 1e6:.3g} ms"
    elif n := _positive_int(labels.get(STEPS_LABEL)):
        # the active window (first kernel to last) when there are kernels, else the session
        window = steady if trace.kernels else phases.Window(start_ns, end_ns)
        what = "active window" if trace.kernels else "session"
        if window.duration_ns > 0:
            steps_per_s = n / (window.duration_ns / 1e9)
            basis = f"steps label: {n} steps over the {what} ({window.duration_ns / 1e9:.3g} s)"
    busy = None
    if trace.kernels and steady.duration_ns > 0:
        busy = trace.busy_ns(steady.start_ns, steady.end_ns) / steady.duration_ns
        busy /= max(1, len(trace.devices))
    means = _gpm_means(metrics, steady.start_ns, steady.end_ns) if steady.duration_ns else {}
    return Run(
        name,
        batch,
        steps_per_s,
        basis,
        busy,
        means.get("gpm_dram_bw_pct"),
        means.get("gpm_tensor_active_pct"),
        means.get("gpm_sm_active_pct"),
    )


def _positive_int(text: str | None) -> int | None:
    try:
        value = int(text) if text is not None else 0
    except ValueError:
        return None
    return value if value > 0 else None


def _gpm_means(metrics: Sequence[GpuMetricSample], start: int, end: int) -> dict[str, float]:
    acc: dict[str, list[float]] = {}
    for m in metrics:
        if m.metric.startswith("gpm_") and m.pid == 0 and start <= m.ts_ns <= end:
            acc.setdefault(m.metric, []).append(m.value)
    return {k: sum(v) / len(v) for k, v in acc.items()}


@dataclass(frozen=True, slots=True)
class Scaling:
    """The verdict over runs: where it turns compute-bound and where throughput stops."""

    runs: tuple[Run, ...]  # usable runs (batch and steps/s known), by batch size
    compute_bound_from: int | None  # smallest batch from which every larger run is bound
    bound_basis: str  # "GPM tensor vs DRAM" or "GPU busy (saturation only)"; "" if neither
    plateau_from: int | None  # smallest batch from which doubling gains < MIN_GAIN
    gains: tuple[tuple[int, int, float], ...]  # (batch, next batch, gain per doubling)
    verdicts: tuple[str, ...]  # one line each, for a person
    missing: tuple[str, ...]  # signals that were not there, per session


def analyse(runs: Sequence[Run]) -> Scaling:
    """Throughput scaling and boundness over runs of one workload at different batch sizes."""
    missing = _missing(runs)
    usable = sorted(
        (r for r in runs if r.samples_per_s is not None), key=lambda r: (r.batch_size or 0, r.name)
    )
    by_batch = _mean_by_batch(usable)
    if len(by_batch) < MIN_RUNS:
        return Scaling(
            tuple(usable),
            None,
            "",
            None,
            (),
            (
                f"no verdict: {len(by_batch)} batch size(s) with throughput; at least {MIN_RUNS} "
                "are needed (record the workload at more batch sizes, each with "
                "--label batch_size=N)",
            ),
            tuple(missing),
        )
    batches = sorted(by_batch)
    gains = tuple(
        (a, b, _gain_per_doubling(a, by_batch[a], b, by_batch[b])) for a, b in pairwise(batches)
    )
    verdicts = []
    bound_from, bound_basis, line = _bound_from(usable, batches)
    verdicts.append(line)
    plateau = _plateau(gains)
    verdicts.append(_plateau_line(plateau, gains, batches, by_batch))
    return Scaling(
        tuple(usable), bound_from, bound_basis, plateau, gains, tuple(verdicts), tuple(missing)
    )


def _missing(runs: Sequence[Run]) -> list[str]:
    out = []
    for r in runs:
        if r.batch_size is None:
            out.append(f"{r.name}: no batch_size label (record with --label batch_size=N)")
        if r.steps_per_s is None:
            out.append(
                f"{r.name}: no steps/s: no kernel recurs once per step and no steps "
                "label (--label steps=N)"
            )
        if r.gpu_busy is None:
            out.append(f"{r.name}: no GPU busy share (no kernel records: record with --gpu)")
        if r.tensor_pct is None or r.dram_pct is None:
            out.append(
                f"{r.name}: no GPM DRAM/tensor counters (NVML GPM needs a Hopper-class "
                "GPU or newer, sampled during the steady state)"
            )
    return out


def _mean_by_batch(runs: Sequence[Run]) -> dict[int, float]:
    acc: dict[int, list[float]] = {}
    for r in runs:
        if r.batch_size is not None and r.samples_per_s is not None:
            acc.setdefault(r.batch_size, []).append(r.samples_per_s)
    return {b: sum(v) / len(v) for b, v in acc.items()}


def _gain_per_doubling(a: int, ta: float, b: int, tb: float) -> float:
    if ta <= 0:
        return math.inf if tb > 0 else 0.0
    return float((tb / ta) ** (1 / math.log2(b / a))) - 1


def _bound_from(runs: Sequence[Run], batches: list[int]) -> tuple[int | None, str, str]:
    """(batch, basis, verdict line): GPM where every run has it, else GPU-busy saturation."""
    if all(r.bound is not None for r in runs):
        flags = _per_batch(runs, lambda r: r.bound == "compute-bound")
        basis, what = "GPM tensor vs DRAM", "compute-bound"
        evidence = _gpm_evidence
    elif all(r.saturated is not None for r in runs):
        flags = _per_batch(runs, lambda r: bool(r.saturated))
        basis, what = "GPU busy (saturation only)", "GPU-saturated"
        evidence = _busy_evidence
    else:
        return (
            None,
            "",
            ("compute-bound: not judged: neither GPM counters nor GPU busy figures for every run"),
        )
    first = _first_of_tail(flags, batches)
    lacks = (
        ""
        if basis.startswith("GPM")
        else (" (no GPM counters in every run, so compute- vs memory-bound is not known)")
    )
    if first is None:
        return (
            None,
            basis,
            (
                f"{what}: not at any batch measured, up to {batches[-1]} "
                f"({evidence(runs, batches[-1])}){lacks}"
            ),
        )
    if first == batches[0]:
        return (
            first,
            basis,
            (
                f"{what}: already at the smallest batch measured, {first} "
                f"({evidence(runs, first)}); record smaller batches to find "
                f"where it turns{lacks}"
            ),
        )
    before = batches[batches.index(first) - 1]
    return (
        first,
        basis,
        (
            f"{what} from batch {first} ({evidence(runs, first)}; at "
            f"{before}: {evidence(runs, before)}){lacks}"
        ),
    )


def _per_batch(runs: Sequence[Run], test: Callable[[Run], bool]) -> dict[int, bool]:
    """Per batch size: whether every run at that size passes ``test``."""
    out: dict[int, bool] = {}
    for r in runs:
        if r.batch_size is not None:
            out[r.batch_size] = out.get(r.batch_size, True) and test(r)
    return out


def _first_of_tail(flags: Mapping[int, bool], batches: list[int]) -> int | None:
    first = None
    for b in reversed(batches):
        if not flags[b]:
            break
        first = b
    return first


def _gpm_evidence(runs: Sequence[Run], batch: int) -> str:
    rs = [r for r in runs if r.batch_size == batch]
    tensor = sum(r.tensor_pct or 0.0 for r in rs) / len(rs)
    dram = sum(r.dram_pct or 0.0 for r in rs) / len(rs)
    return f"tensor {tensor:.0f} %, DRAM {dram:.0f} %"


def _busy_evidence(runs: Sequence[Run], batch: int) -> str:
    rs = [r for r in runs if r.batch_size == batch]
    busy = sum(r.gpu_busy or 0.0 for r in rs) / len(rs)
    return f"GPU busy {100 * busy:.0f} %"


def _plateau(gains: Sequence[tuple[int, int, float]]) -> int | None:
    first = None
    for a, _, g in reversed(gains):
        if g >= MIN_GAIN:
            break
        first = a
    return first


def _plateau_line(
    plateau: int | None,
    gains: Sequence[tuple[int, int, float]],
    batches: list[int],
    tput: Mapping[int, float],
) -> str:
    if plateau is None:
        a, b, g = gains[-1]
        return (
            f"throughput still improves at the largest batch measured: {a} -> {b} "
            f"gains {100 * g:.0f} % per doubling ({tput[a]:.4g} -> {tput[b]:.4g} "
            "samples/s); try larger batches"
        )
    after = [(a, b, g) for a, b, g in gains if a >= plateau]
    worst = max(g for _, _, g in after)
    last = batches[-1]
    where = "from the smallest batch measured, " if plateau == batches[0] else ""
    return (
        f"throughput stops improving {where}at batch {plateau}: {tput[plateau]:.4g} samples/s"
        f", {tput[last]:.4g} at {last}; each doubling beyond gains at most "
        f"{100 * worst:.1f} % (< {100 * MIN_GAIN:.0f} %)"
    )
