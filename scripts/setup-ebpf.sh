#!/bin/sh
# Prepare this machine for bcc: kernel headers where bcc looks, and tracefs mounted.
#
# Why: bcc compiles its BPF C program against /lib/modules/$(uname -r)/build; a kernel
# without packaged headers (this project's Firecracker VMs) needs the nearest Debian
# headers linked there (see shared/docs/ebpf-notes.md). tracefs is needed for tracepoints
# and uprobes (and for bcc's clean detach). Idempotent: safe to run on every `make`.
# Needs root; prints what it did or why it could not.
set -eu

KVER="$(uname -r)"
MODDIR="/lib/modules/$KVER"

if [ "$(id -u)" != 0 ]; then
    echo "setup-ebpf: not root, skipping (run as root to link kernel headers and mount tracefs)" >&2
    exit 0
fi

# Debian's python3-bpfcc + linux-headers-amd64 (+ bpftool for the benchmark), if missing.
if ! /usr/bin/python3 -c 'import bcc' 2>/dev/null || ! ls -d /usr/src/linux-headers-*-amd64 >/dev/null 2>&1 \
        || ! command -v bpftool >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        echo "setup-ebpf: installing python3-bpfcc linux-headers-amd64 bpftool"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-bpfcc linux-headers-amd64 bpftool >/dev/null \
            || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
                 apt-get install -y -q python3-bpfcc linux-headers-amd64 bpftool >/dev/null; }
    fi
fi

# Kernel headers: the running kernel's own if packaged, else the newest Debian ones.
if [ ! -e "$MODDIR/build/Makefile" ] || [ ! -e "$MODDIR/source/include/linux/kconfig.h" ]; then
    if [ -d "/usr/src/linux-headers-$KVER" ]; then
        BUILD="/usr/src/linux-headers-$KVER"
        SOURCE="$BUILD"
    else
        BUILD="$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n 1 || true)"
        if [ -z "$BUILD" ]; then
            echo "setup-ebpf: no kernel headers under /usr/src: apt-get install linux-headers-amd64" >&2
            exit 1
        fi
        SOURCE="${BUILD%-amd64}-common"
    fi
    mkdir -p "$MODDIR"
    ln -sfn "$BUILD" "$MODDIR/build"
    ln -sfn "$SOURCE" "$MODDIR/source"
    echo "setup-ebpf: linked $MODDIR/build -> $BUILD, source -> $SOURCE"
fi

# tracefs (tracepoints, uprobes, clean detach).
if [ ! -e /sys/kernel/tracing/events ]; then
    mkdir -p /sys/kernel/tracing
    mount -t tracefs nodev /sys/kernel/tracing
    echo "setup-ebpf: mounted tracefs at /sys/kernel/tracing"
fi
