#!/bin/bash
# On the GPU machine: record tests/fixtures/gpu/truth/launch_time (a raw capture whose
# launch rows carry launch times) and rerun the GPU tests that read launch times and
# attribution. Usage (repo root): OUT=/tmp/out bash tests/gpu/launch_time_run.sh
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kubeprof-launch-out}; mkdir -p "$OUT/launch_time"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$OUT/pip.txt" 2>&1 || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src:$PWD/agent:$PWD/operator${PYTHONPATH:+:$PYTHONPATH}
w=$OUT/launch_time; store=sqlite:////tmp/launch_time.db
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch; print("torch", torch.__version__)'; } >"$w/machine.txt" 2>&1
KUBEPROF_GPU_CAPTURE=$w/launch_time.kpgcap.gz python3 -m kubeprof.cli record --gpu --no-cpu \
  --store "$store" -o launch_time -- python3 examples/launch_times.py --steps 40 \
  >"$w/launch_time.stdout.txt" 2>"$w/record.stderr.txt"
echo "record rc=$?"
python3 -m kubeprof.cli report launch_time --store "$store" --format text >"$w/launch_time.report.txt" 2>&1
echo "report rc=$?"
timeout ${PYTEST_TIMEOUT:-300} python3 -m pytest -m gpu -s -q -p no:cacheprovider -o addopts="" \
  tests/gpu/test_gpu_record_e2e.py tests/gpu/test_gpu_launch_time.py >"$OUT/pytest.txt" 2>&1
echo "pytest rc=$?"
grep -E "launch->start|passed|failed|not attributed|attributed to a Python" "$OUT/pytest.txt" | cut -c1-300
ls -la "$w"
