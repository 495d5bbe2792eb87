#!/usr/bin/env bash
# What `make images` costs, and what it makes (BENCHMARKS.md, "Images"):
#   bench/image_build.sh           # warm: layers and the base tarball cached, sources unchanged
#   bench/image_build.sh --cold    # first removes both images, the base image, dangling build
#                                  # layers and the cached mmdebstrap tarball
# Prints the wall time, the image sizes and where the agent image's bytes are.
# It builds a clean export of HEAD (what CI builds), not the working tree: other edits in
# a shared checkout would count as source changes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SRC=$(mktemp -d)
trap 'rm -rf "$SRC"' EXIT
git archive HEAD | tar -x -C "$SRC"
VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' charts/kubeprof/Chart.yaml)
REPO=${KUBEPROF_IMAGE_REPO:-ghcr.io/kubeprof}
P=(podman --runtime runc)
if [ "${1:-}" = --cold ]; then
    "${P[@]}" rmi -f "$REPO/kubeprof-operator:$VERSION" "$REPO/kubeprof-agent:$VERSION" >/dev/null 2>&1 || true
    "${P[@]}" images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/kubeprof-base:' \
        | xargs -r "${P[@]}" rmi -f >/dev/null 2>&1 || true
    "${P[@]}" image prune -f >/dev/null
    rm -f "${KUBEPROF_CACHE:-$HOME/.cache/kubeprof}"/images/debian-bookworm-*.tar
fi
log=$(mktemp)
start=$(date +%s)
"$SRC/scripts/build_images.sh" >"$log" 2>&1 || { tail -n 30 "$log"; exit 1; }
echo "make images (HEAD $(git rev-parse --short HEAD)): $(( $(date +%s) - start )) s" \
     "($([ "${1:-}" = --cold ] && echo cold || echo warm)), load $(cut -d' ' -f1-3 /proc/loadavg)"
grep '^\[images\]' "$log"
"${P[@]}" images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E 'kubeprof-(operator|agent|base)'
"${P[@]}" run --rm --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 --entrypoint sh \
    "$REPO/kubeprof-agent:$VERSION" -c 'cd /opt/kubeprof && du -sh --exclude=tracer .;
        for d in tracer tracer/deps tracer/py/* /usr/lib/x86_64-linux-gnu; do du -sh "$d"; done'
rm -f "$log"
