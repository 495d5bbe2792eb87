#!/bin/bash
# One call on the GPU machine: record examples/train_torch.py at several batch sizes with
# `kubeprof record --gpu --label batch_size=N` (NVML + GPM sampled), then `kubeprof compare`
# over them, and export each session's measured run figures (steps/s, GPU busy, GPM DRAM and
# tensor %) and energy inputs to batch_sweep.json, small enough to commit as a fixture.
# Usage (repo root, wheels in .whl as tests/gpu/truth_run.sh expects):
#   OUT=/tmp/out bash tests/gpu/batch_sweep.sh [BATCH ...]
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kubeprof-sweep-out}; W=${W:-/tmp/kubeprof-sweep-work}; mkdir -p "$W" "$OUT"
PY=${PY:-python3}
log=$W/log.txt
say() { echo "[$(date -u +%T) +${SECONDS}s] $*" | tee -a "$log"; }
pack() { tar czf "$OUT/sweep.tgz.tmp" -C "$W" --exclude='*.db' . && mv "$OUT/sweep.tgz.tmp" "$OUT/sweep.tgz"; }
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >>"$log" 2>&1 || { say "wheel install failed"; pack; exit 1; }
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
fi
export PYTHONPATH=$PWD/src:$PWD/agent:$PWD/operator${PYTHONPATH:+:$PYTHONPATH}
KP="$PY -m kubeprof.cli"
DB="sqlite:///$W/sweep.db"
batches=("$@"); [ ${#batches[@]} -eq 0 ] && batches=(8 16 32 64 128 256)
names=()
for b in "${batches[@]}"; do
  steps=$(( 2048 / b )); [ "$steps" -lt 40 ] && steps=40
  say "record bs$b ($steps steps)"
  timeout 240 $KP record --gpu --store "$DB" -o "bs$b" --label "batch_size=$b" \
    --cloud-provider aws --region us-east-1 -- \
    $PY examples/train_torch.py --batch "$b" --steps "$steps" >"$W/bs$b.stdout" 2>"$W/bs$b.stderr"
  say "  rc=$? $(tail -n 1 "$W/bs$b.stderr")"
  names+=("bs$b")
  pack
done
$KP compare --store "$DB" "${names[@]}" >"$W/compare.txt" 2>&1; say "compare rc=$?"
$KP report --store "$DB" bs64 >"$W/bs64.report.txt" 2>&1
$KP report --store "$DB" bs64 --format json --out "$W/bs64.report.json" >>"$log" 2>&1
$PY - "$DB" "${names[@]}" >"$W/batch_sweep.json" 2>>"$log" <<'PYEOF'
import json, sys
from dataclasses import asdict
from kubeprof.analysis import batch_scaling
from kubeprof.compare import session_labels
from kubeprof.storage import Store
from kubeprof.storage import queries as q
from kubeprof.storage import compare_queries as cq
store = Store.open(sys.argv[1])
out = []
with store.engine.connect() as conn:
    for ref in sys.argv[2:]:
        info = q.find_session(conn, ref)
        acts, metrics = q.gpu_activities(conn, info.id), q.gpu_metrics(conn, info.id)
        run = batch_scaling.run_from_records(info.name, session_labels(info.meta), acts,
                                             metrics, info.start_ns, info.end_ns)
        energy = {n: [[m.ts_ns, m.device, m.metric, m.value] for m in ms]
                  for n, ms in cq.energy_metrics_by_node(conn, info.id).items()}
        out.append({"run": asdict(run), "meta": info.meta, "wall_s": info.duration_s,
                    "cpu_samples": info.samples, "hz": info.hz, "kernels": len(acts),
                    "energy_metrics": energy})
print(json.dumps(out, indent=1, default=str))
PYEOF
say "export rc=$?"
cat "$W/compare.txt" | tee -a "$log"
pack
