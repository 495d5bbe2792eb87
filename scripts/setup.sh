#!/usr/bin/env bash
# One-shot, idempotent set-up for a fresh machine of this project's kind (Debian, root):
# system packages, eBPF prerequisites, and the virtual environment at .venv/ with kubeprof
# installed editable. A second run checks stamps and returns in seconds.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '[setup] %s\n' "$*" >&2; }

# System packages. bcc comes from Debian (python3-bpfcc): the PyPI "bcc" is unrelated.
# python3-seccomp (libseccomp) applies the container runtime's seccomp profile in a test.
PKGS="python3-bpfcc python3-venv python3-seccomp linux-headers-amd64 bpftool postgresql-15 gcc openssl"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        log "missing Debian packages:$missing; run as root or: sudo apt-get install$missing"
        exit 1
    fi
    log "installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q $missing >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q $missing >/dev/null; }
fi

# Debian's prometheus: promtool checks and unit-tests the chart's alert rules, and the e2e
# tests run a real Prometheus against the operator. Without recommends (no exporters); its
# service is not used.
if ! dpkg -s prometheus >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || { log "missing Debian package prometheus; run: sudo apt-get install --no-install-recommends prometheus"; exit 1; }
    log "installing prometheus (promtool, for the chart's alert rules)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null; }
fi

# Headless Chromium for the web UI's browser tests (tests/browser); optional elsewhere.
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        log "installing chromium (browser tests of the web UI)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 \
            || { apt-get update -q >/dev/null \
                 && apt-get install -y -q --no-install-recommends chromium >/dev/null; } \
            || log "chromium not installed: tests/browser will be skipped"
    else
        log "chromium missing (tests/browser skip): sudo apt-get install chromium"
    fi
fi

sh scripts/setup-ebpf.sh

# The venv uses Debian's python3 with system site-packages, so `import bcc` works in it.
STAMP=".venv/.kubeprof-installed-$(cat pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
    if [ ! -x .venv/bin/python ]; then
        log "creating .venv (Debian python3, --system-site-packages for bcc)"
        /usr/bin/python3 -m venv --system-site-packages .venv
    fi
    log "installing kubeprof and its dependencies into .venv"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e '.[dev]'
    rm -f .venv/.kubeprof-installed-*
    touch "$STAMP"
fi
# The GPU tracer's C launch hook for this venv's Python (the tracer falls back to its Python
# callback where it is not built); rebuilt when the source is newer than the module.
# One stable-ABI build (_launchhook.abi3.so) serves every Python >= 3.10.
HOOK_SO=agent/kubeprof/agent/gpu/_launchhook.abi3.so
if [ ! -f "$HOOK_SO" ] || [ agent/kubeprof/agent/gpu/_launchhook.c -nt "$HOOK_SO" ]; then
    scripts/build_launchhook.sh .venv/bin/python
fi
.venv/bin/python -c 'import bcc, kubeprof.cli' || { log "the venv cannot import bcc or kubeprof"; exit 1; }
log "ready: $(.venv/bin/kubeprof --help | head -1)"
