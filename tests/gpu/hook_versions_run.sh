#!/bin/bash
# Which Pythons on this machine load the tracer's C launch hook (the one stable-ABI build the
# agent image's bundle carries: _launchhook.abi3.so) and key call sites right. No network
# needed. Usage, from the repository root on the GPU machine:
#   OUT=/tmp/out bash tests/gpu/hook_versions_run.sh
# HOOK= a folder holding _launchhook.abi3.so (default agent/kubeprof/agent/gpu, where
# `make setup` builds it: carry that file, or have cc and any Python >= 3.10 headers here to
# build it). PYTHONS= the interpreters to try (default: every python3.X found on PATH, in
# /usr/bin, /usr/local/bin, /opt/conda*, ~/.pyenv, ~/.local/share/uv). Prints one line per
# interpreter and a summary of the bundle's versions (3.10-3.13); $OUT/hook_versions.txt.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kubeprof-hook-versions}; mkdir -p "$OUT"
HOOK=${HOOK:-agent/kubeprof/agent/gpu}
report="$OUT/hook_versions.txt"; : >"$report"
say() { echo "$*" | tee -a "$report"; }
if [ ! -f "$HOOK/_launchhook.abi3.so" ]; then
    for py in python3 /usr/bin/python3; do
        command -v "$py" >/dev/null && scripts/build_launchhook.sh "$py" "$HOOK" 2>>"$report" && break
    done
fi
[ -f "$HOOK/_launchhook.abi3.so" ] || { say "no $HOOK/_launchhook.abi3.so and no way to build it here"; exit 1; }
say "hook: $HOOK/_launchhook.abi3.so sha256 $(sha256sum "$HOOK/_launchhook.abi3.so" | cut -c1-16)"
if [ -z "${PYTHONS:-}" ]; then
    PYTHONS=$( { compgen -c python3. | sort -u | while read -r n; do command -v "$n"; done
                 ls /usr/bin/python3.* /usr/local/bin/python3.* /opt/conda*/bin/python3* \
                    ~/.pyenv/versions/*/bin/python3 ~/.local/share/uv/python/*/bin/python3 2>/dev/null
               } | grep -E 'python3(\.[0-9]+)?$' | while read -r p; do readlink -f "$p"; done | sort -u)
fi
declare -A ok
for py in $PYTHONS; do
    v=$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null) || continue
    got=$("$py" tests/gpu/hook_versions_check.py "$HOOK" 2>&1 | tail -n 1)
    if [ "$got" = "[1] [2] ['layer', 'layer'] 2" ]; then
        say "LOADS  $v  $py"; ok[${v%.*}]=1
    else
        say "FAILS  $v  $py: $got"
    fi
done
miss=""; for m in 3.10 3.11 3.12 3.13; do [ -n "${ok[$m]:-}" ] || miss="$miss $m"; done
say "bundle versions proven here: $(for m in 3.10 3.11 3.12 3.13; do [ -n "${ok[$m]:-}" ] && printf '%s ' $m; done)${miss:+; not proven (no interpreter or failed):$miss}"
