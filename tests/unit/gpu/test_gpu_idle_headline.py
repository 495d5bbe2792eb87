"""The one GPU-idle definition: CUPTI kernel spans first, NVML only as a labelled fallback."""

from __future__ import annotations

import pytest

from kubeprof.analysis import gpu_idle, steady_idle
from kubeprof.analysis.phases import Window
from kubeprof.model import GpuActivity, GpuMetricSample

KERNELS = [
    GpuActivity("kernel", "k", 100, 200, 0, 7, 1),
    GpuActivity("kernel", "k", 300, 500, 0, 7, 2),
    GpuActivity("kernel", "k", 100, 500, 1, 7, 3),
]
UTIL = [
    GpuMetricSample(1, 0, "gpu_util_pct", 20.0),
    GpuMetricSample(2, 0, "gpu_util_pct", 40.0),
    GpuMetricSample(2, 0, "gpu_util_pct", 90.0, pid=7),  # per process: never used
    GpuMetricSample(1, 2, "gpu_util_pct", 100.0),
]


def test_headline_prefers_cupti_spans_over_nvml():
    h = gpu_idle.headline(KERNELS, UTIL)
    assert h is not None and h.source == "cupti" and h.window == Window(100, 500)
    # device 0 busy 300 of 400, device 1 busy 400 of 400
    assert h.devices == 2 and h.ratio == pytest.approx(1 - 700 / 800)
    assert h.ratio == gpu_idle.session(KERNELS, *gpu_idle.window(KERNELS)).idle_ratio


def test_headline_falls_back_to_device_wide_nvml_and_says_so():
    h = gpu_idle.headline([], UTIL)
    assert h is not None and h.source == "nvml" and h.devices == 2
    assert h.ratio == pytest.approx(((1 - 0.30) + (1 - 1.0)) / 2)
    assert gpu_idle.headline([], []) is None
    memcpy_only = [GpuActivity("memcpy", "m", 0, 10, 0, 7, 1)]  # a copy keeps it busy
    h = gpu_idle.headline(memcpy_only, UTIL)
    assert h is not None and h.source == "cupti" and h.ratio == 0.0


def test_per_device_uses_nvml_only_where_no_kernel_ran():
    figs = gpu_idle.per_device(KERNELS, UTIL)
    assert {d: f.source for d, f in figs.items()} == {0: "cupti", 1: "cupti", 2: "nvml"}
    assert figs[0].ratio == pytest.approx(0.25) and figs[1].ratio == 0.0
    assert figs[2].ratio == 0.0


def test_combine_weights_by_devices_and_labels_mixed_sources():
    a = steady_idle.of_ratio(0.5, "cupti", Window(0, 10), 3)
    b = steady_idle.of_ratio(0.9, "nvml", Window(5, 20), 1)
    c = gpu_idle.combine([a, b])
    assert c is not None and c.ratio == pytest.approx(0.6) and c.source == "cupti+nvml"
    assert c.window == Window(0, 20) and c.kernel_busy is None  # a mean has no engine split
    assert c.devices == 4 and gpu_idle.combine([a]) == a and gpu_idle.combine([]) is None
