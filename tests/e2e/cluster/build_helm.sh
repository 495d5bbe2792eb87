#!/usr/bin/env bash
# Build the pinned helm CLI from the Go module proxy into the same version-keyed cache as
# the control plane (build.sh); a second run finds it and exits at once.
#
#   tests/e2e/cluster/build_helm.sh       # prints nothing on stdout; the binary is at
#                                         # $KUBEPROF_CLUSTER_CACHE/bin/helm-$HELM_VERSION/helm
# The wrapper module (go.mod/go.sum pinned, committed) lives in gomod/helm; if its go.mod is
# missing it is (re)generated from the pin below.
set -euo pipefail

HELM_VERSION=v4.3.2

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
CACHE="${KUBEPROF_CLUSTER_CACHE:-$ROOT/.cache/kubeprof-cluster}"
HELM_BIN="$CACHE/bin/helm-$HELM_VERSION"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

log() { printf '[build %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

[[ -x "$HELM_BIN/helm" ]] && { log "helm cached: $HELM_BIN/helm"; exit 0; }
d="$HERE/gomod/helm"
if [[ ! -f "$d/go.mod" ]]; then
  log "generating $d/go.mod"
  (cd "$d" && go mod init kubeprof.local/e2e/helmbin >/dev/null 2>&1 &&
    go mod edit -go=1.26.0 && go get -tool "helm.sh/helm/v4/cmd/helm@$HELM_VERSION")
fi
log "building helm $HELM_VERSION"
mkdir -p "$HELM_BIN.tmp"
# helm prints its version from these variables (`helm version`).
ld="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
(cd "$d" && go build -trimpath -ldflags "$ld" -o "$HELM_BIN.tmp/helm" helm.sh/helm/v4/cmd/helm)
rm -rf "$HELM_BIN" && mv "$HELM_BIN.tmp" "$HELM_BIN"
log "helm ready: $HELM_BIN/helm"
