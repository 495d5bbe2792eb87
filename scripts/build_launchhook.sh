#!/usr/bin/env bash
# Builds the tracer's C launch hook (agent/kubeprof/agent/gpu/_launchhook.c) for one Python:
#   scripts/build_launchhook.sh [PYTHON] [OUTDIR]
# Needs a C compiler and that Python's headers; without them it says so and exits 0: the
# tracer then uses its pure-Python callback (KUBEPROF_GPU_HOOK=auto), slower per launch.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=${1:-python3}
SRC="$ROOT/agent/kubeprof/agent/gpu/_launchhook.c"
OUTDIR=${2:-$(dirname "$SRC")}
read -r INC SUFFIX < <("$PY" -c 'import sysconfig as s; print(s.get_paths()["include"], s.get_config_var("EXT_SUFFIX"))')
CC=${CC:-cc}
if ! command -v "$CC" >/dev/null 2>&1 || [ ! -f "$INC/Python.h" ]; then
    echo "[launchhook] no C compiler or no Python.h in $INC: the tracer will use its Python callback" >&2
    exit 0
fi
OUT="$OUTDIR/_launchhook$SUFFIX"
"$CC" -O2 -g0 -shared -fPIC -Wall -Wextra -Wno-unused-parameter -Wno-cast-function-type \
    -I"$INC" "$SRC" -o "$OUT.tmp" -ldl
mv "$OUT.tmp" "$OUT"
echo "[launchhook] built $OUT" >&2
