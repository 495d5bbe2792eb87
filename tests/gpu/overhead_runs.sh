#!/bin/bash
# One call on the GPU machine: the GPU tests once, then bench/gpu_overhead.py RUNS times
# (fresh processes each run), for the decode-loss median over runs (issue 29).
# Usage (repo root; wheels from scripts/device_wheels.sh, carried as .whl):
#   OUT=/tmp/out RUNS=3 MODES=kubeprof,kineto_stack bash tests/gpu/overhead_runs.sh
#   KUBEPROF_BENCH_STRETCH_PAIRS=12   fewer recording-length stretch pairs (default 16)
#   KUBEPROF_BENCH_PAIRS=30   fewer 128-token chunk pairs (default 40)
#   MODES=kubeprof_ab,kineto_stack   decode only: keys read in place vs through the frame API,
#                                    alternating in one process (bench/gpu_overhead.py)
#   RUNS=0   the GPU tests alone
#   CPUS=2,3,4,5   pin every bench child to these CPUs
#   BREAKDOWN=decode|launch   also run --breakdown (C hook) on that loop after the first run
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kubeprof-overhead-out}; mkdir -p "$OUT"
RUNS=${RUNS:-3}; MODES=${MODES:-kubeprof,kineto_stack}; REPS=${REPS:-5}
BUDGET_S=${BUDGET_S:-560}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$OUT/pip.txt" 2>&1 || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src:$PWD/agent:$PWD/operator${PYTHONPATH:+:$PYTHONPATH}
log=$OUT/log.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >>"$log" 2>&1
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout ${PYTEST_TIMEOUT:-240} python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider \
    -o addopts="" >"$OUT/pytest.txt" 2>&1
  echo "pytest rc=$? after ${SECONDS}s" >>"$log"
fi
need=60  # a run is started only with the last run's length (plus 10 %) left
for i in $(seq 1 "$RUNS"); do
  left=$((BUDGET_S - SECONDS))
  [ "$left" -gt "$need" ] || { echo "run $i skipped: ${left}s left, ${need}s needed" >>"$log"; break; }
  t0=$SECONDS
  timeout "$left" python3 bench/gpu_overhead.py --modes "$MODES" --reps "$REPS" \
    --cpus "${CPUS:-}" --out "$OUT/bench$i.json" >"$OUT/bench$i.txt" 2>&1
  echo "bench run $i rc=$? after ${SECONDS}s" >>"$log"
  need=$(( (SECONDS - t0) * 11 / 10 ))
  if [ "$i" = 1 ] && [ -n "${BREAKDOWN:-}" ]; then
    left=$((BUDGET_S - SECONDS))
    timeout "$left" python3 bench/gpu_overhead.py --breakdown --hooks c --reps "$REPS" \
      --breakdown-loop "$BREAKDOWN" --cpus "${CPUS:-}" --out "$OUT/breakdown.json" \
      >"$OUT/breakdown.txt" 2>&1
    echo "breakdown ($BREAKDOWN) rc=$? after ${SECONDS}s" >>"$log"
  fi
done
cat "$log"; tail -5 "$OUT/pytest.txt" 2>/dev/null
for f in "$OUT"/bench*.txt "$OUT"/breakdown.txt; do [ -f "$f" ] && { echo "== $f"; tail -16 "$f"; }; done
