"""On a GPU: NVML sampler readings and one-metric PM sampling joined to kernels."""

from __future__ import annotations

import json

import pytest
from harness import python, run_traced

from tests.support.pm_join import per_kernel_means

pytestmark = pytest.mark.gpu

BURST = (
    "import torch, time\n"
    "a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\n"
    "big = torch.ones(256 * 2**20, device='cuda')\n"
    "t = time.time()\n"
    "while time.time() - t < 3:\n"
    "    for _ in range(10): a @ a\n"
    "    big.mul_(1.0001)\n"
    "    torch.cuda.synchronize()\n"
    "print('burst ok')\n"
)


def test_nvml_sampler_sees_device_process_and_gpm() -> None:
    t = run_traced([python(), "-c", BURST], nvml=True)
    names = {m.metric for m in t.metrics}
    print(json.dumps(sorted(names)))
    by = {}
    for m in t.metrics:
        by.setdefault(m.metric, []).append(m.value)
    print(json.dumps({k: [min(v), max(v), len(v)] for k, v in by.items()}))
    assert t.returncode == 0
    assert {"gpu_util_pct", "power_mw", "sm_clock_mhz", "mem_used_bytes"} <= names
    assert max(by["gpu_util_pct"]) > 50
    assert "proc_mem_used_bytes" in names
    assert {"gpm_sm_active_pct", "gpm_tensor_active_pct", "gpm_dram_bw_pct"} <= names


def test_pm_sampling_dram_per_kernel() -> None:
    t = run_traced([python(), "-c", BURST], env={"KUBEPROF_GPU_PM": "1"})
    pm = [m for m in t.metrics if m.metric.startswith("pm:")]
    print("pm samples", len(pm), t.messages[:3], t.counters)
    if not pm and any("ERROR_INVALID_PARAMETER" in m for m in t.messages):
        # gpu-notes.md: what libcupti 13.0 (torch's own) answers to every PM query
        pytest.skip(
            "PM sampling needs libcupti 13.4 in place of torch's 13.0 (pip install "
            "--upgrade nvidia-cuda-cupti~=13.4 in torch's environment)"
        )
    assert pm, f"PM sampling gave no samples: {t.messages[:2]}"
    means = per_kernel_means(t.kernels, pm)
    names = {k.correlation_id: k.demangled or k.name for k in t.kernels}
    agg: dict[str, list[float]] = {}
    for m in means:
        agg.setdefault(names[m.correlation_id][:60], []).append(m.value)
    summary = {k: sum(v) / len(v) for k, v in agg.items()}
    print(json.dumps(summary, indent=1))
    # gpu-notes.md on the H200: bf16 matmul ~20 % of peak DRAM throughput, a 1 GiB mul_ ~88 %
    mul = [v for k, v in agg.items() if "elementwise" in k or "Mul" in k]
    gemm = [v for k, v in agg.items() if "nvjet" in k or "gemm" in k.lower()]
    assert mul and gemm, sorted(agg)
    mul_mean = sum(map(sum, mul)) / sum(map(len, mul))
    gemm_mean = sum(map(sum, gemm)) / sum(map(len, gemm))
    assert mul_mean > 60, summary  # memory-bound: most of peak DRAM throughput
    assert gemm_mean < 45, summary  # compute-bound: far less
    assert all(0 <= m.value <= 100 for m in pm)
