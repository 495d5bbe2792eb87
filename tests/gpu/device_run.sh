#!/bin/bash
# One call on a GPU machine: install the carried wheels, run the GPU tests, then the benchmark.
# Usage (repo root): OUT=/tmp/out bash tests/gpu/device_run.sh [tests|bench|all] [pytest args...]
set -u
what=${1:-all}; shift || true
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kubeprof-gpu-out}; mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src:$PWD/agent:$PWD/operator${PYTHONPATH:+:$PYTHONPATH}
log=$OUT/log.txt
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import sys, torch, cupti.cupti as c; print(sys.version.split()[0], torch.__version__, 'cuda', torch.version.cuda); print('cupti ok', c.get_timestamp() > 0)"
  python3 -c "from importlib import metadata as m; print({d: m.version(d) for d in ('cupti-python','nvidia-cuda-cupti','nvidia-ml-py','jax')})"
} >>"$log" 2>&1
if [ "$what" = tests ] || [ "$what" = all ]; then
  KUBEPROF_GPU_FIXTURES_OUT=$OUT/fixtures KUBEPROF_GPU_REPORT_OUT=$OUT/reports.jsonl \
    timeout ${PYTEST_TIMEOUT:-420} python3 -m pytest -m gpu tests/gpu -s -q -p no:cacheprovider -o addopts="" "$@" >>"$log" 2>&1
  echo "pytest rc=$?" >>"$log"
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  timeout ${BENCH_TIMEOUT:-300} python3 bench/gpu_overhead.py --reps ${BENCH_REPS:-10} --out "$OUT/bench.json" >>"$log" 2>&1
  echo "bench rc=$?" >>"$log"
fi
tail -c 11000 "$log"
