#!/usr/bin/env bash
# Downloads into .whl/ the wheels the GPU machine lacks (CPython 3.12, manylinux x86_64), for
# the device scripts in tests/gpu/ (each installs .whl/*.whl with --no-deps when it exists):
#   cupti-python and its libcupti 13.4 (the tracer), pyelftools (cupti-python imports it),
#   and what `kubeprof record` imports that the GPU image has none of: SQLAlchemy (+ greenlet),
#   Alembic (+ Mako), psycopg (+ its binary), msgspec. Without the last group
#   tests/gpu/test_gpu_record_e2e.py fails with "No module named 'sqlalchemy'" (2026-12-06).
# Usage (repo root, where pip reaches PyPI): bash scripts/device_wheels.sh
# Then name ".whl" (and the built launch hook) in the device call's carry.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
grep -qx '/.whl/' .gitignore || { echo "[wheels] .gitignore must list /.whl/" >&2; exit 1; }
PY=${PY:-python3}
want=(
    "cupti-python==13.4.0" "nvidia-cuda-cupti==13.4.92" pyelftools
    "sqlalchemy>=2.0,<2.2" greenlet alembic mako psycopg psycopg-binary "msgspec>=0.18"
)
plat=()
for n in 17 24 25 27 28; do plat+=(--platform "manylinux_2_${n}_x86_64"); done
mkdir -p .whl
for w in "${want[@]}"; do
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${plat[@]}" --platform manylinux2014_x86_64 -d .whl "$w"
done
ls .whl
du -sh .whl  # a device call carries at most 64 MiB in all
