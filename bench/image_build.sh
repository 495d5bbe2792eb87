#!/usr/bin/env bash
# What `make images` costs, and what it makes (BENCHMARKS.md, "Images"):
#   bench/image_build.sh           # warm: layers and the base tarball cached, sources unchanged
#   bench/image_build.sh --cold    # first removes both images, the base image, the kept build
#                                  # stages, dangling layers and the cached mmdebstrap tarball
#   bench/image_build.sh --sources-changed  # warm, one line added to a source file first:
#                                  # what a contributor's edit costs `make test`
# Prints the wall time, the image sizes and where the agent image's bytes are.
# It builds a clean export of HEAD (what CI builds), not the working tree: other edits in
# a shared checkout would count as source changes. KUBEPROF_BENCH_REV=REV builds another
# commit (the same way, its own scripts and Dockerfiles), to compare side by side;
# KUBEPROF_IMAGE_REPO=localhost/kubeprof-bench keeps the runs off the images tests use.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SRC=$(mktemp -d)
trap 'rm -rf "$SRC"' EXIT
REV=${KUBEPROF_BENCH_REV:-HEAD}
git archive "$REV" | tar -x -C "$SRC"
if [ "${1:-}" = --sources-changed ]; then
    echo "# bench/image_build.sh --sources-changed $(date +%s.%N)" >>"$SRC/src/kubeprof/cli.py"
fi
VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' charts/kubeprof/Chart.yaml)
REPO=${KUBEPROF_IMAGE_REPO:-ghcr.io/kubeprof}
P=(podman --runtime runc)
if [ "${1:-}" = --cold ]; then
    "${P[@]}" rmi -f "$REPO/kubeprof-operator:$VERSION" "$REPO/kubeprof-agent:$VERSION" >/dev/null 2>&1 || true
    "${P[@]}" images --format '{{.Repository}}:{{.Tag}}' | grep -E '^localhost/kubeprof-(base|stage):' \
        | xargs -r "${P[@]}" rmi -f >/dev/null 2>&1 || true
    "${P[@]}" image prune -f >/dev/null
    rm -f "${KUBEPROF_CACHE:-$HOME/.cache/kubeprof}"/images/debian-bookworm-*.tar
fi
log=$(mktemp)
start=$(date +%s.%N)
"$SRC/scripts/build_images.sh" >"$log" 2>&1 || { tail -n 30 "$log"; exit 1; }
echo "make images ($REV $(git rev-parse --short "$REV")): $(echo "$(date +%s.%N) - $start" | bc) s" \
     "(${1:---warm}), load $(cut -d' ' -f1-3 /proc/loadavg)"
grep '^\[images\]' "$log"
"${P[@]}" images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E 'kubeprof-(operator|agent|base)'
"${P[@]}" run --rm --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 --entrypoint sh \
    "$REPO/kubeprof-agent:$VERSION" -c 'cd /opt/kubeprof && du -sh --exclude=tracer .;
        for d in tracer tracer/deps tracer/py/* /usr/lib/x86_64-linux-gnu; do du -sh "$d"; done'
rm -f "$log"
