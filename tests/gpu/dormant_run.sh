#!/bin/bash
# One call on the GPU machine (issue 12): the injected tracer's cost while dormant and once switched on.
# Usage (repo root): OUT=/tmp/out bash tests/gpu/dormant_run.sh
set -u
W=/tmp/kpd; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl > $W/pip.log 2>&1
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $W/env.txt
timeout 500 python3 bench/gpu_dormant.py --rounds 5 --reps 5 --out $OUT/dormant.json 2>&1 | tail -25
