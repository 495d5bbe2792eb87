#!/usr/bin/env bash
# Builds the operator and agent images with podman from a Debian bookworm base made here with
# mmdebstrap (no container registry needed), tagged with the chart's appVersion:
#   scripts/build_images.sh            # both images
#   scripts/build_images.sh agent      # one of them
# Environment:
#   KUBEPROF_IMAGE_REPO   prefix of the image names (default ghcr.io/kubeprof, the chart's)
#   KUBEPROF_CACHE        where the base tarball is kept between runs (default ~/.cache/kubeprof)
#   KUBEPROF_BUILD_CA     CA bundle pip inside the build trusts (default: pip's own setting
#                         here, PIP_CERT / pip config), a build secret kept out of the image
# The Dockerfiles take their base as `--build-arg BASE=...`; elsewhere `docker buildx build`
# with the default (a registry's debian:12 slim) builds the same files.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '[images] %s\n' "$*" >&2; }

VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' charts/kubeprof/Chart.yaml)
[ -n "$VERSION" ] || { log "no appVersion in charts/kubeprof/Chart.yaml"; exit 1; }
REPO=${KUBEPROF_IMAGE_REPO:-ghcr.io/kubeprof}
CACHE=${KUBEPROF_CACHE:-$HOME/.cache/kubeprof}
WHICH=${*:-operator agent}

# Tools (Debian's): podman with runc (crun refuses cgroup v1 hybrid hosts), mmdebstrap.
missing=""
for p in podman runc mmdebstrap; do command -v "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
    [ "$(id -u)" = 0 ] || { log "missing:$missing; run: sudo apt-get install$missing"; exit 1; }
    log "installing$missing"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman runc mmdebstrap >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null \
             && DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman runc mmdebstrap >/dev/null; }
fi
# Lower limits than the host's: podman's defaults ask for more than this machine grants.
PODMAN=(podman --runtime runc)
LIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=4096:4096)
# A TLS-intercepting proxy's CA (this machine's pip trusts one): a secret of the pip steps.
CA=${KUBEPROF_BUILD_CA:-${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}}
SECRET=()
[ -n "$CA" ] && [ -s "$CA" ] && SECRET=(--secret "id=ca,src=$CA")

# The base: Debian bookworm minbase with python3, keyed by its package list so a change
# rebuilds it; the tarball is reused by every later run on this machine.
# Documentation, man pages and translations are left out (dpkg path-exclude, kept for copyright
# files), as Debian's own slim images do.
BASE_PKGS="python3,ca-certificates"
SLIM=(--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*'
      --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/doc/*'
      --dpkgopt='path-include=/usr/share/doc/*/copyright')
KEY=$(printf '%s' "bookworm minbase $BASE_PKGS ${SLIM[*]}" | sha256sum | cut -c1-12)
BASE_TAG="localhost/kubeprof-base:bookworm-$KEY"
TARBALL="$CACHE/images/debian-bookworm-$KEY.tar"
if ! "${PODMAN[@]}" image exists "$BASE_TAG"; then
    if [ ! -f "$TARBALL" ]; then
        log "building the base with mmdebstrap ($BASE_PKGS) into $TARBALL"
        mkdir -p "$(dirname "$TARBALL")"
        mmdebstrap --quiet --format=tar --variant=minbase "${SLIM[@]}" --include="$BASE_PKGS" bookworm "$TARBALL.tmp"
        mv "$TARBALL.tmp" "$TARBALL"
    fi
    log "importing $TARBALL as $BASE_TAG"
    "${PODMAN[@]}" import "$TARBALL" "$BASE_TAG" >/dev/null
fi

# What goes into an image (the files its Dockerfile copies, as .dockerignore leaves them, and
# the base): an image already built from the same inputs is kept (a fresh clone's new file
# times would otherwise rebuild it: ~75 s of every `make test`). KUBEPROF_IMAGES_REBUILD=1
# builds anyway.
inputs() {
    { printf '%s\n' "$BASE_TAG"
      find "docker/$1.Dockerfile" docker/dependencies.py docker/install_kubeprof.sh \
          scripts/build_launchhook.sh pyproject.toml README.md hatch_build.py \
          src agent operator -type f ! -path '*/__pycache__/*' ! -name '*.pyc' \
          ! -name '_launchhook*.so' -print0 | sort -z | xargs -0 sha256sum
    } | sha256sum | cut -c1-16
}

KEEP_STAGES="reqs tools hooks venv"
for c in $WHICH; do
    [ -f "docker/$c.Dockerfile" ] || { log "no docker/$c.Dockerfile"; exit 1; }
    tag="$REPO/kubeprof-$c:$VERSION"
    key=$(inputs "$c")
    have=$("${PODMAN[@]}" image inspect --format '{{index .Labels "dev.kubeprof.inputs"}}' "$tag" 2>/dev/null || true)
    if [ "$have" = "$key" ] && [ -z "${KUBEPROF_IMAGES_REBUILD:-}" ]; then
        log "kept $tag: built from these inputs already ($key)"
        continue
    fi
    log "building $tag from docker/$c.Dockerfile (inputs $key)"
    start=$(date +%s)
    old=$("${PODMAN[@]}" image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
    "${PODMAN[@]}" build --network host "${LIMITS[@]}" "${SECRET[@]}" --build-arg "BASE=$BASE_TAG" \
        --label "dev.kubeprof.inputs=$key" -f "docker/$c.Dockerfile" -t "$tag" .
    log "built $tag in $(( $(date +%s) - start )) s, $("${PODMAN[@]}" image inspect --format '{{.Size}}' "$tag") bytes"
    # The stages built beside the image (its dependencies' venv and the tracer downloads,
    # the build tools, the C hook): tagged, so that the prune below keeps them for the
    # next build, which then redoes only kubeprof's own layer (a source change: seconds, not
    # the ~60 s of downloads). Each tag moves when its stage changes.
    for s in $KEEP_STAGES; do
        grep -q "^FROM .* AS $s\$" "docker/$c.Dockerfile" || continue
        "${PODMAN[@]}" build -q --network host "${LIMITS[@]}" "${SECRET[@]}" --build-arg "BASE=$BASE_TAG" \
            --target "$s" -f "docker/$c.Dockerfile" -t "localhost/kubeprof-stage:$c-$s" . >/dev/null
    done
    # The image this tag named before, and the untagged build stages: ~3.4 GB a rebuild of
    # both, which filled this machine's disk after a day of fresh-clone runs.
    new=$("${PODMAN[@]}" image inspect --format '{{.Id}}' "$tag")
    if [ -n "$old" ] && [ "$old" != "$new" ]; then
        "${PODMAN[@]}" rmi "$old" >/dev/null 2>&1 || log "kept the old $tag ($old): in use"
    fi
    "${PODMAN[@]}" image prune -f >/dev/null 2>&1 || true
done
