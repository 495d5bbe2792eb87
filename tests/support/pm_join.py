"""Per-kernel means of PM-sampling metrics: samples falling inside each kernel's interval."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from kubeprof.model import GpuActivity, GpuMetricSample


def per_kernel_means(
    kernels: Iterable[GpuActivity], samples: Sequence[GpuMetricSample]
) -> list[GpuMetricSample]:
    """One sample per (kernel, metric) with samples inside it, keyed by correlation id."""
    by_key: dict[tuple[int, str], list[GpuMetricSample]] = {}
    for s in samples:
        if s.metric.startswith("pm:") and not s.correlation_id:
            by_key.setdefault((s.device, s.metric), []).append(s)
    series = {k: (sorted(v, key=lambda s: s.ts_ns)) for k, v in by_key.items()}
    stamps = {k: [s.ts_ns for s in v] for k, v in series.items()}
    out = []
    for k in kernels:
        if k.kind != "kernel":
            continue
        for (device, metric), rows in series.items():
            if device != k.device:
                continue
            ts = stamps[(device, metric)]
            lo, hi = bisect.bisect_left(ts, k.start_ns), bisect.bisect_right(ts, k.end_ns)
            if hi > lo:
                mean = sum(r.value for r in rows[lo:hi]) / (hi - lo)
                out.append(
                    GpuMetricSample(
                        k.start_ns, device, metric, mean, pid=k.pid, correlation_id=k.correlation_id
                    )
                )
    return out
