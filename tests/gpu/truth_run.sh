#!/bin/bash
# One call on the GPU machine: record every examples/gpu_truth.py mode with
# `kubeprof record --gpu` (CPU through the py-spy fallback where BPF cannot load), capture the
# raw GPU wire input, export each session as a fixture with its KUBEPROF_TRUTH line and
# `kubeprof report` text, then a small examples/train_torch.py run with raw capture (issue 11),
# then, if time is left, the launch-bound tracing overhead. Everything lands in $OUT/truth.tgz
# (re-made after each stage, so a run cut short still returns what it finished).
# Usage (repo root): OUT=/tmp/out bash tests/gpu/truth_run.sh [MODE ...]
# DRY=1 skips the GPU parts (checks the wiring on a machine without a GPU); SKIP_TRAIN=1,
# SKIP_BENCH=1 skip the train_torch recording and the overhead benchmark.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kubeprof-truth-out}; W=${W:-/tmp/kubeprof-truth-work}; mkdir -p "$W" "$OUT"
BUDGET_S=${BUDGET_S:-540}   # stop starting stages after this; the device call allows 600
PY=${PY:-python3}
log=$W/log.txt
say() { echo "[$(date -u +%T) +${SECONDS}s] $*" | tee -a "$log"; }
pack() { tar czf "$OUT/truth.tgz.tmp" -C "$W" . && mv "$OUT/truth.tgz.tmp" "$OUT/truth.tgz"; }
left() { [ $((BUDGET_S - SECONDS)) -gt "$1" ]; }

if [ -z "${DRY:-}" ] && [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >>"$log" 2>&1 || { say "wheel install failed"; pack; exit 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  export PATH=/tmp/site/bin:$PATH
fi
export PYTHONPATH=$PWD/src:$PWD/agent:$PWD/operator${PYTHONPATH:+:$PYTHONPATH}
KP="$PY -m kubeprof.cli"
DB="sqlite:///$W/truth.db"

{
  date -u; uname -r
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  $PY - <<'EOF'
import json, sys
from importlib import metadata as m
v = {"python": sys.version.split()[0]}
for d in ("torch", "cupti-python", "nvidia-cuda-cupti", "nvidia-ml-py", "py-spy", "SQLAlchemy"):
    try:
        v[d] = m.version(d)
    except m.PackageNotFoundError:
        v[d] = None
print(json.dumps(v))
EOF
  which py-spy
  $PY -c "from cupti import cupti as c; print('memory kinds', {k.name: int(k) for k in c.ActivityMemoryKind})" 2>&1 | tail -n 1
  $PY -c "from kubeprof.agent.cpu import preflight; print('bpf:', preflight.check_environment() or 'ok')"
} >"$W/env.txt" 2>&1
cat "$W/env.txt" >>"$log"
EXTRA=$($PY -c "
import json, subprocess
lines = open('$W/env.txt').read().splitlines()
out = {'recorded_on': lines[0], 'gpu': lines[2] if len(lines) > 2 else ''}
for l in lines:
    if l.startswith('{'):
        out['versions'] = json.loads(l)
print(json.dumps(out))")

record() {  # NAME TIMEOUT_S CMD...: record, report, export
  local name=$1 tmo=$2; shift 2
  if ! left "$tmo"; then say "skip $name: ${SECONDS}s used of ${BUDGET_S}s"; return; fi
  say "record $name: $*"
  if [ -n "${DRY:-}" ]; then
    timeout "$tmo" $KP record --store "$DB" -o "$name" -- "$@" >"$W/$name.stdout" 2>"$W/$name.stderr"
  else
    KUBEPROF_GPU_CAPTURE=$W/$name.kpgcap.gz timeout "$tmo" $KP record --gpu --store "$DB" \
      -o "$name" -- "$@" >"$W/$name.stdout" 2>"$W/$name.stderr"
  fi
  say "  rc=$? $(grep -c KUBEPROF_TRUTH "$W/$name.stdout") truth line(s); $(tail -n 2 "$W/$name.stderr" | tr '\n' ' ')"
  $KP report --store "$DB" "$name" >"$W/$name.report.txt" 2>&1
  local rel; rel=$(echo "$*" | sed "s#^$PY ##; s#$PWD/##g")
  $PY tests/gpu/truth_export.py --store "$DB" --session "$name" --out "$W/$name.jsonl.gz" \
    --command "$rel" --stdout "$W/$name.stdout" --extra "$EXTRA" >>"$log" 2>&1
  tail -n 1 "$log"
  pack
}

modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(compute half starved tiny item pageable pageable_pinned)
for m in "${modes[@]}"; do
  case $m in
    pageable_pinned) record "$m" 75 $PY examples/gpu_truth.py --mode pageable --pinned ;;
    # off the training-loop shape (issue 26): examples/gpu_shapes.py
    serve) record "$m" 75 $PY examples/gpu_shapes.py --mode serve --name serve --seconds 6 ;;
    copyonly) record "$m" 75 $PY examples/gpu_shapes.py --mode copyonly --name copyonly --steps 300 ;;
    loader_starved) record "$m" 90 $PY examples/gpu_shapes.py --mode loader --name "$m" \
      --workers 4 --pinned --item-ms 1.0 --steps 300 ;;
    loader_pageable) record "$m" 90 $PY examples/gpu_shapes.py --mode loader --name "$m" \
      --workers 4 --item-ms 1.0 --side 384 --steps 200 ;;
    loader_ok) record "$m" 90 $PY examples/gpu_shapes.py --mode loader --name "$m" \
      --workers 8 --pinned --item-ms 0.1 --matmuls 6 --steps 200 ;;
    train_torch) ;;
    *) record "$m" 75 $PY examples/gpu_truth.py --mode "$m" ;;
  esac
done
# issue 11: a real training loop's raw inputs (a few steps keep the capture small)
[ -z "${SKIP_TRAIN:-}" ] && record train_torch 120 $PY examples/train_torch.py --steps 12 --batch 16
if [ -z "${DRY:-}" ] && [ -z "${SKIP_BENCH:-}" ] && left 100; then
  say "overhead: bench/gpu_overhead.py --modes kubeprof,kubeprof_activity --reps 4"
  timeout $((BUDGET_S - SECONDS - 10)) $PY bench/gpu_overhead.py --modes kubeprof,kubeprof_activity \
    --reps 4 --out "$W/overhead.json" >"$W/overhead.txt" 2>&1
  say "  overhead rc=$?"; tail -n 4 "$W/overhead.txt" | tee -a "$log"
fi
ls -la "$W" >>"$log"
pack
say "done"
tail -c 6000 "$log"
