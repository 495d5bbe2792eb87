#!/usr/bin/env bash
# Build the pinned control-plane binaries from the Go module proxy into a
# version-keyed cache folder; a second run finds them and exits at once.
#
#   tests/e2e/cluster/build.sh            # build what is missing
#   KUBEPROF_CLUSTER_CACHE=/path ...      # override the cache root
#
# Wrapper modules (go.mod/go.sum pinned, committed) live in gomod/{k8s,etcd,kwok}.
# If a go.mod is missing it is (re)generated from the pins below.
set -euo pipefail

K8S_VERSION=v1.36.3
K8S_STAGING_VERSION=v0.36.3
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
CACHE="${KUBEPROF_CLUSTER_CACHE:-$ROOT/.cache/kubeprof-cluster}"
BIN="$CACHE/bin"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

K8S_BIN="$BIN/kubernetes-$K8S_VERSION"
ETCD_BIN="$BIN/etcd-$ETCD_VERSION"
KWOK_BIN="$BIN/kwok-$KWOK_VERSION"

# Staging modules required at v0.0.0 by k8s.io/kubernetes v1.36 (see shared doc §1).
STAGING="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go
cloud-provider cluster-bootstrap code-generator component-base component-helpers
controller-manager cri-api cri-client cri-streaming csi-translation-lib
dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator
kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils
pod-security-admission sample-apiserver streaming"

log() { printf '[build %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

init_k8s_mod() {
  local d="$HERE/gomod/k8s"
  [[ -f "$d/go.mod" ]] && return 0
  log "generating $d/go.mod"
  (cd "$d" && go mod init kubeprof.local/e2e/k8sbins >/dev/null 2>&1 &&
    go mod edit -go=1.26.0 -godebug=default=go1.26 &&
    for m in $STAGING; do go mod edit -replace="k8s.io/$m=k8s.io/$m@$K8S_STAGING_VERSION"; done &&
    go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" \
      "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION" \
      "k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION")
}

init_simple_mod() {  # dir modname toolpkg@version
  local d="$HERE/gomod/$1"
  [[ -f "$d/go.mod" ]] && return 0
  log "generating $d/go.mod"
  (cd "$d" && go mod init "$2" >/dev/null 2>&1 && go mod edit -go=1.26.0 && go get -tool "$3")
}

build_etcd() {
  [[ -x "$ETCD_BIN/etcd" ]] && { log "etcd cached: $ETCD_BIN/etcd"; return 0; }
  init_simple_mod etcd kubeprof.local/e2e/etcdbin "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  log "building etcd $ETCD_VERSION"
  mkdir -p "$ETCD_BIN.tmp"
  (cd "$HERE/gomod/etcd" && go build -trimpath -ldflags '-s -w' -o "$ETCD_BIN.tmp/etcd" go.etcd.io/etcd/server/v3)
  rm -rf "$ETCD_BIN" && mv "$ETCD_BIN.tmp" "$ETCD_BIN"
}

build_kwok() {
  [[ -x "$KWOK_BIN/kwok" && -d "$KWOK_BIN/stages" ]] && { log "kwok cached: $KWOK_BIN/kwok"; return 0; }
  init_simple_mod kwok kubeprof.local/e2e/kwokbin "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  log "building kwok $KWOK_VERSION"
  mkdir -p "$KWOK_BIN.tmp/stages"
  (cd "$HERE/gomod/kwok" && go build -trimpath -ldflags '-s -w' -o "$KWOK_BIN.tmp/kwok" sigs.k8s.io/kwok/cmd/kwok)
  # kwok v0.8.0 ships no built-in stages: copy the "fast" set from the module cache.
  local src
  src="$(cd "$HERE/gomod/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage"
  cp "$src/node/fast/node-initialize.yaml" \
     "$src/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
     "$src/pod/fast/pod-ready.yaml" "$src/pod/fast/pod-complete.yaml" \
     "$src/pod/fast/pod-delete.yaml" "$KWOK_BIN.tmp/stages/"
  chmod u+w "$KWOK_BIN.tmp/stages/"*
  rm -rf "$KWOK_BIN" && mv "$KWOK_BIN.tmp" "$KWOK_BIN"
}

build_k8s() {
  local c have=1
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    [[ -x "$K8S_BIN/$c" ]] || have=0
  done
  [[ $have == 1 ]] && { log "kubernetes cached: $K8S_BIN"; return 0; }
  init_k8s_mod
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  mkdir -p "$K8S_BIN.tmp"
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    log "building $c $K8S_VERSION"
    (cd "$HERE/gomod/k8s" && go build -trimpath -ldflags "$ld" -o "$K8S_BIN.tmp/$c" "k8s.io/kubernetes/cmd/$c")
  done
  rm -rf "$K8S_BIN" && mv "$K8S_BIN.tmp" "$K8S_BIN"
}

main() {
  local t0=$SECONDS
  mkdir -p "$BIN"
  build_etcd
  build_kwok
  build_k8s
  log "all binaries ready under $BIN ($((SECONDS - t0))s)"
}

main "$@"
