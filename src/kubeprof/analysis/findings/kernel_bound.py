"""Memory- vs compute-bound: measured counters where the session has them, else a stated
heuristic on kernel names.

Measured: per-kernel PM-sampling rows (metrics ``pm:*`` with a correlation id, DRAM and
tensor throughput) classify each kernel; device-wide GPM samples (``gpm_dram_bw_pct``,
``gpm_tensor_active_pct``) over the steady state classify the workload as a whole.
"""

from __future__ import annotations

import re
from collections import defaultdict

from kubeprof.analysis.findings.context import Context, pct, window_words
from kubeprof.analysis.findings.model import Evidence, Finding, Kind, Severity
from kubeprof.analysis.kernel_names import short_name

MEMORY_PCT = 50.0  # DRAM bandwidth utilisation from which a kernel/workload is memory-bound
TENSOR_PCT = 30.0  # tensor-core activity from which it is compute-bound
TOP = 5
COMPUTE_NAMES = re.compile(
    r"gemm|matmul|conv|cutlass|xmma|nvjet|wgmma|cublas|cudnn|flash|fmha|attention", re.I
)
HEURISTIC = (
    "name heuristic: GEMM/convolution/attention kernels (gemm, nvjet, cutlass, xmma, conv, "
    "flash) are compute-bound, everything else (elementwise, reductions, norms, copies) "
    "memory-bound"
)


def classify(dram: float, tensor: float) -> str:
    if dram >= MEMORY_PCT and dram >= tensor:
        return "memory-bound"
    if tensor >= TENSOR_PCT:
        return "compute-bound"
    return "neither (latency-bound or mixed)"


def find(ctx: Context) -> Finding | None:
    kernels = ctx.steady_kernels
    if not kernels:
        return None
    time_by: dict[str, int] = defaultdict(int)
    label: dict[str, str] = {}
    for k in kernels:
        time_by[k.name] += k.end_ns - k.start_ns
        if k.name not in label:
            label[k.name] = short_name(k.demangled or k.name)
    all_ns = sum(time_by.values())
    top = sorted(time_by, key=time_by.__getitem__, reverse=True)[:TOP]
    per_kernel = _pm_per_kernel(ctx, set(top))
    lines = []
    memory_ns = 0
    for name in top:
        if name in per_kernel:
            dram, tensor = per_kernel[name]
            cls, basis = classify(dram, tensor), f"PM: DRAM {dram:.0f} %, tensor {tensor:.0f} %"
        else:
            cls = "compute-bound" if COMPUTE_NAMES.search(label[name]) else "memory-bound"
            basis = "name heuristic"
        memory_ns += time_by[name] if cls == "memory-bound" else 0
        lines.append(
            f"{label[name]}: {cls} ({basis}), {pct(time_by[name] / all_ns)} of kernel time"
        )
    numbers: dict[str, float] = {"top_memory_bound_share": memory_ns / all_ns}
    gpm = _gpm_means(ctx)
    if gpm is not None:
        dram, tensor, sm = gpm
        verdict = classify(dram, tensor)
        numbers |= {
            "gpm_dram_bw_pct": dram,
            "gpm_tensor_active_pct": tensor,
            "gpm_sm_active_pct": sm,
        }
        head = (
            f"Over {window_words(ctx)} the GPU is {verdict} by GPM counters: DRAM bandwidth "
            f"{dram:.0f} %, "
            f"tensor cores {tensor:.0f} %, SMs {sm:.0f} % active"
        )
    else:
        verdict = (
            "memory-bound" if memory_ns * 2 >= sum(time_by[n] for n in top) else "compute-bound"
        )
        head = (
            f"Top kernels of {window_words(ctx)} are mostly {verdict} (no GPM counters; "
            f"{HEURISTIC})"
        )
    advice = (
        "memory-bound time shrinks with fusion and lower precision, not with more FLOPs"
        if verdict == "memory-bound"
        else "compute-bound kernels gain from tensor-core friendly shapes and precision"
    )
    return Finding(
        Kind.KERNEL_BOUND,
        Severity.INFO,
        f"{head}; {advice}.",
        Evidence(numbers=numbers, kernels=tuple(lines)),
    )


def _pm_per_kernel(ctx: Context, names: set[str]) -> dict[str, tuple[float, float]]:
    """Mean DRAM and tensor throughput per kernel name from per-kernel PM rows."""
    by_corr = {k.correlation_id: k.name for k in ctx.steady_kernels if k.name in names}
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for m in ctx.metrics:
        name = by_corr.get(m.correlation_id) if m.correlation_id else None
        if name is None or not m.metric.startswith("pm:"):
            continue
        row = acc[name]
        if "dram" in m.metric:
            row[0] += m.value
            row[1] += 1
        elif "tensor" in m.metric:
            row[2] += m.value
            row[3] += 1
    return {n: (r[0] / r[1], r[2] / r[3] if r[3] else 0.0) for n, r in acc.items() if r[1]}


def _gpm_means(ctx: Context) -> tuple[float, float, float] | None:
    w = ctx.phases.steady
    acc: dict[str, list[float]] = defaultdict(list)
    for m in ctx.metrics:
        if m.metric.startswith("gpm_") and not m.pid and w.start_ns <= m.ts_ns <= w.end_ns:
            acc[m.metric].append(m.value)
    if not acc.get("gpm_dram_bw_pct") or not acc.get("gpm_tensor_active_pct"):
        return None
    mean = {k: sum(v) / len(v) for k, v in acc.items()}
    return (
        mean["gpm_dram_bw_pct"],
        mean["gpm_tensor_active_pct"],
        mean.get("gpm_sm_active_pct", 0.0),
    )
