#!/usr/bin/env bash
# Builds the tracer's C launch hook (agent/kubeprof/agent/gpu/_launchhook.c) once for every
# CPython >= 3.10: against the stable ABI (Py_LIMITED_API 3.10), as _launchhook.abi3.so,
# which each of 3.10-3.13 imports (tests/unit/gpu/test_launchhook_versions.py):
#   scripts/build_launchhook.sh [PYTHON] [OUTDIR]
# PYTHON (>= 3.10) only supplies the headers. Needs a C compiler and those headers; without
# them it says so and exits 0: the tracer then uses its pure-Python callback
# (KUBEPROF_GPU_HOOK=auto), slower per launch.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=${1:-python3}
SRC=${LAUNCHHOOK_SRC:-$ROOT/agent/kubeprof/agent/gpu/_launchhook.c}  # another copy: benchmarks
OUTDIR=${2:-$(dirname "$SRC")}
read -r INC OK < <("$PY" -c 'import sys, sysconfig as s; print(s.get_paths()["include"], int(sys.version_info >= (3, 10)))')
CC=${CC:-cc}
if [ "$OK" != 1 ] || ! command -v "$CC" >/dev/null 2>&1 || [ ! -f "$INC/Python.h" ]; then
    echo "[launchhook] no C compiler, or no Python >= 3.10 headers in $INC: the tracer will use its Python callback" >&2
    exit 0
fi
mkdir -p "$OUTDIR"
OUT="$OUTDIR/_launchhook.abi3.so"
"$CC" -O2 -g0 -shared -fPIC -Wall -Wextra -Wno-unused-parameter -Wno-cast-function-type \
    -DPy_LIMITED_API=0x030A0000 -I"$INC" "$SRC" -o "$OUT.tmp" -Wl,--no-as-needed -l:libdl.so.2
mv "$OUT.tmp" "$OUT"
# A per-version build beside it would be imported first (its suffix ranks before abi3).
rm -f "$OUTDIR"/_launchhook.cpython-*.so
echo "[launchhook] built $OUT" >&2
