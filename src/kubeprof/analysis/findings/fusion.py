"""Fusion candidates: recurring runs of back-to-back short elementwise/reduction kernels
launched from one Python function, which a fused kernel (torch.compile, a custom or Triton
kernel) would run as one pass over memory."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from kubeprof.analysis.findings.context import Context, pct, us, user_frame, window_words
from kubeprof.analysis.findings.model import Evidence, Finding, Kind, Severity
from kubeprof.analysis.findings.stake import graded, window_gain
from kubeprof.analysis.kernel_names import short_name
from kubeprof.model import Frame, GpuActivity

SHORT_NS = 50_000  # a kernel this short is dominated by launch and memory round trips
BACK_TO_BACK_NS = 200_000  # consecutive kernels this close belong to one run
MIN_RUN = 3  # kernels in a run
MIN_KERNELS = 10  # kernels in such runs from one function before it is a pattern
MIN_SHARE = 0.02  # estimated saving, of the steady state, before it is worth a finding
FUSED_GAIN = (
    "a fused kernel costs about as much as the longest kernel of the run it replaces "
    "(elementwise work is bound by one pass over memory); the rest of the run's span, "
    "kernels and gaps, is saved"
)
ELEMENTWISE = re.compile(
    r"elementwise|vectorized|unrolled|reduce|reduction|pointwise|triton_(poi|red|per)|"
    r"_fusion|activation|softmax|norm|foreach|fill|copy_kernel|where|add|mul|div|sub",
    re.IGNORECASE,
)


# Plain counters: like other counter records (the shipper's) in shape only.
@dataclass
class _Runs:
    runs: int = 0
    kernels: int = 0
    span_ns: int = 0
    kernel_ns: int = 0
    saved_ns: int = 0
    names: set[str] | None = None
    lines: set[int] | None = None


def find(ctx: Context) -> Finding | None:
    if ctx.figures.steady.ratio is None or ctx.steady_ns <= 0:
        return None
    frames: dict[int, Frame | None] = {}
    names: dict[str, bool] = {}
    acc: dict[tuple[str, str], _Runs] = defaultdict(_Runs)
    run: list[tuple[GpuActivity, Frame]] = []
    for k in (*ctx.steady_kernels, None):
        f = _candidate_frame(k, frames, names) if k is not None else None
        if run and (
            f is None
            or k is None
            or (f.name, f.file) != (run[-1][1].name, run[-1][1].file)
            or k.device != run[-1][0].device
            or k.start_ns - run[-1][0].end_ns > BACK_TO_BACK_NS
        ):
            _close(run, acc)
            run = []
        if k is not None and f is not None:
            run.append((k, f))
    best = [(key, r) for key, r in acc.items() if r.kernels >= MIN_KERNELS]
    if not best:
        return None
    (name, file), top = max(best, key=lambda kv: kv[1].saved_ns)
    saved = sum(r.saved_ns for _, r in best)
    if saved < MIN_SHARE * ctx.steady_ns:
        return None
    per_run = top.kernels / top.runs
    per_step = top.kernels / ctx.steps if ctx.steps else float(top.kernels)
    lines = sorted(top.lines or ())
    where = f"{file.rsplit('/', 1)[-1]}:{','.join(map(str, lines[:6]))}"
    message = (
        f"Fusion candidate: `{name}` ({where}) launches ~{per_step:.0f} short elementwise "
        f"kernels per step back to back (runs of ~{per_run:.0f}, mean kernel "
        f"{us(top.kernel_ns / max(1, top.kernels))}); fusing them (torch.compile, a Triton "
        f"kernel) would save ~{pct(saved / ctx.steady_ns)} of {window_words(ctx)}."
    )
    evidence = Evidence(
        numbers={
            "runs": top.runs,
            "kernels_per_step": per_step,
            "kernels_per_run": per_run,
            "functions": len(best),
            "saved_share": saved / ctx.steady_ns,
        },
        kernels=tuple(sorted(top.names or ())[:8]),
        lines=tuple(f"{file}:{ln} {name}" for ln in lines[:8]),
    )
    severity = graded(ctx, saved, 0.1, (Severity.WARNING, Severity.INFO))
    return Finding(Kind.FUSION, severity, message, evidence, window_gain(ctx, saved, FUSED_GAIN))


def _candidate_frame(
    k: GpuActivity, cache: dict[int, Frame | None], names: dict[str, bool]
) -> Frame | None:
    if k.end_ns - k.start_ns > SHORT_NS:
        return None
    elementwise = names.get(k.name)
    if elementwise is None:
        elementwise = names[k.name] = bool(ELEMENTWISE.search(k.demangled or k.name))
    if not elementwise:
        return None
    key = id(k.stack)
    if key not in cache:
        cache[key] = user_frame(k.stack)
    return cache[key]


def _close(run: list[tuple[GpuActivity, Frame]], acc: dict[tuple[str, str], _Runs]) -> None:
    if len(run) < MIN_RUN:
        return
    f = run[0][1]
    r = acc[(f.name, f.file)]
    span = run[-1][0].end_ns - run[0][0].start_ns
    longest = max(k.end_ns - k.start_ns for k, _ in run)
    r.runs += 1
    r.kernels += len(run)
    r.span_ns += span
    r.kernel_ns += sum(k.end_ns - k.start_ns for k, _ in run)
    r.saved_ns += span - longest
    r.names = (r.names or set()) | {short_name(k.demangled or k.name) for k, _ in run}
    r.lines = (r.lines or set()) | {fr.line for _, fr in run}
