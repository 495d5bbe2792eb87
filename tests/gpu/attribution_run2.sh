#!/bin/bash
# Second call on the GPU machine (issue 11): the autograd sequence-number probe (cost per read),
# the PM-sampling test with libcupti 13.4 put in place of torch's 13.0 (gpu-notes.md), and the
# torch training GPU test with backward attribution on. Usage: OUT=/tmp/out bash tests/gpu/attribution_run2.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kubeprof-attr-out}; mkdir -p "$OUT"; log=$OUT/log2.txt
say() { echo "[$(date -u +%T) +${SECONDS}s] $*" | tee -a "$log"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >>"$log" 2>&1 || say "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/agent:$PWD/operator PATH=/tmp/site/bin:$PATH
say "probe"; timeout 60 python3 tests/gpu/attribution_probe.py >>"$log" 2>&1; say "  rc=$?"
T="timeout 240 python3 -m pytest -m gpu -q -s -p no:cacheprovider -o addopts="
say "torch training test"
$T tests/gpu/test_gpu_training.py::test_torch_fast_vs_slow_dataloader 2>&1 | grep -v "^  " | tail -n 40 >>"$log"
say "in-place libcupti 13.4 for PM sampling"
python3 -m pip install -q --no-index --no-deps --upgrade .whl/nvidia_cuda_cupti-*.whl >>"$log" 2>&1; say "  rc=$?"
$T tests/gpu/test_gpu_metrics.py::test_pm_sampling_dram_per_kernel 2>&1 | tail -n 40 >>"$log"
say "done"; cat "$log"
