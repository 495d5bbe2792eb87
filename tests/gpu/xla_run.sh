#!/bin/bash
# One call on the GPU machine (issue 11, JAX): record examples/train_jax.py under
# `kubeprof record --gpu` with the HLO dump on (raw capture + the optimised modules) and off,
# print the attribution shares of the capture replayed with and without the modules, and
# each run's wall time (the dump's cost is at compile time).
# Everything lands in $OUT/xla.tgz. Usage (repo root): OUT=/tmp/out bash tests/gpu/xla_run.sh
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kubeprof-xla-out}; W=${W:-/tmp/kubeprof-xla-work}; mkdir -p "$W" "$OUT"
PY=${PY:-python3}
log=$W/log.txt
say() { echo "[$(date -u +%T) +${SECONDS}s] $*" | tee -a "$log"; }
pack() { tar czf "$OUT/xla.tgz.tmp" -C "$W" . && mv "$OUT/xla.tgz.tmp" "$OUT/xla.tgz"; }
if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >>"$log" 2>&1 || { say "wheel install failed"; pack; exit 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
fi
export PYTHONPATH=$PWD/src:$PWD/agent:$PWD/operator${PYTHONPATH:+:$PYTHONPATH}
KP="$PY -m kubeprof.cli"; DB="sqlite:///$W/xla.db"
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $PY -c "import json, sys, jax; from importlib import metadata as m; print(json.dumps({'python': sys.version.split()[0], 'jax': jax.__version__, 'jaxlib': m.version('jaxlib'), **{d: m.version(d) for d in ('cupti-python', 'nvidia-cuda-cupti')}}))"
} >"$W/env.txt" 2>&1; cat "$W/env.txt" >>"$log"
ARGS="--steps 20"
record() {  # NAME XLA_DUMP(path|0)
  local name=$1 t0=$SECONDS
  say "record $name (KUBEPROF_GPU_XLA_DUMP=$2)"
  KUBEPROF_GPU_XLA_DUMP=$2 KUBEPROF_GPU_CAPTURE=$W/$name.kpgcap.gz timeout 240 $KP record --gpu \
    --no-cpu --store "$DB" -o "$name" -- $PY examples/train_jax.py $ARGS \
    >"$W/$name.stdout" 2>"$W/$name.stderr"
  say "  rc=$? wall $((SECONDS - t0)) s; $(tail -n 2 "$W/$name.stdout" | tr '\n' ' ')"
  $KP report --store "$DB" "$name" >"$W/$name.report.txt" 2>&1
  pack
}
record train_jax "$W/train_jax.xla"
record train_jax_nodump 0
# Keep only the optimised modules (the receiver reads nothing else): small enough to commit.
find "$W/train_jax.xla" -type f ! -name '*after_optimizations.txt' -delete
du -sh "$W/train_jax.xla" "$W"/*.kpgcap.gz | tee -a "$log"
say "shares (with the dump beside the capture, then the same capture without it)"
$PY tests/gpu/attribution_shares.py "$W/train_jax.kpgcap.gz" "$W/train_jax_nodump.kpgcap.gz" 2>&1 | tee -a "$log"
grep -n "XLA\|main thread\|attributed" "$W/train_jax.report.txt" | head -n 12 >>"$log"
pack
say "done"
