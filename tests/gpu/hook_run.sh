#!/bin/bash
# One call on the GPU machine for issue 14 (the C launch hook): build the hook with the
# machine's python3, then (1) bench/gpu_overhead.py --breakdown (per activity kind and per
# callback, C and Python hooks), (2) the overhead table, kubeprof and torch.profiler side by
# side, launch-bound / compute-bound / training / batch-1 decode, (3) truth fixtures recorded
# with the C hook (tests/gpu/truth_run.sh). Everything lands in $OUT/hook.tgz, re-made after
# each stage. Usage (repo root): OUT=/tmp/out bash tests/gpu/hook_run.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kubeprof-hook-out}; W=${W:-/tmp/kubeprof-hook-work}; mkdir -p "$W" "$OUT"
BUDGET_S=${BUDGET_S:-520}
REPS=${REPS:-6}; BREPS=${BREPS:-5}; HOOKS=${HOOKS:-c,python}; TRUTH=${TRUTH:-item tiny}
MODES=${MODES:-kubeprof,kineto_stack,kineto,kubeprof_pyhook,kubeprof_activity}
log=$W/log.txt
say() { echo "[$(date -u +%T) +${SECONDS}s] $*" | tee -a "$log"; }
pack() { tar czf "$OUT/hook.tgz.tmp" -C "$W" . && mv "$OUT/hook.tgz.tmp" "$OUT/hook.tgz"; }
left() { [ $((BUDGET_S - SECONDS)) -gt "$1" ]; }

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >>"$log" 2>&1 || { say "wheel install failed"; pack; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/agent:$PWD/operator${PYTHONPATH:+:$PYTHONPATH}
export PATH=/tmp/site/bin:$PATH
say "build: $(python3 -c 'import sysconfig as s; print(s.get_paths()["include"])'); cc=$(command -v cc)"
scripts/build_launchhook.sh python3 >>"$log" 2>&1 || say "device build failed: the carried build is used"
python3 -c "import kubeprof.agent.gpu._launchhook as h; print('hook', h.__file__)" 2>&1 | tee -a "$log"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$log" 2>&1

say "breakdown --reps $BREPS"
timeout 200 python3 bench/gpu_overhead.py --breakdown --hooks "$HOOKS" --reps "$BREPS" --out "$W/breakdown.json" \
  >"$W/breakdown.txt" 2>&1; say "  rc=$?"; cat "$W/breakdown.txt" >>"$log"; pack

if left 150; then
  say "overhead --modes $MODES --reps $REPS"
  timeout $((BUDGET_S - SECONDS - 70)) python3 bench/gpu_overhead.py --modes "$MODES" \
    --reps "$REPS" --out "$W/overhead.json" >"$W/overhead.txt" 2>&1
  say "  rc=$?"; tail -n 9 "$W/overhead.txt" | tee -a "$log"; pack
fi

if left 60; then
  say "truth fixtures with the C hook"
  OUT=$W/truth W=/tmp/kubeprof-truthwork BUDGET_S=$((BUDGET_S - SECONDS - 15)) SKIP_BENCH=1 \
    bash tests/gpu/truth_run.sh $TRUTH >"$W/truth_run.txt" 2>&1
  say "  rc=$?"
fi
pack
say "done"
tail -c 5000 "$log"
