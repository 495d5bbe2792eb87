"""Locate the cached binaries and build them (via build.sh) when missing."""

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from . import versions


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of every executable and kwok stage file a cluster needs."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    kwok_stages: tuple[Path, ...]


STAGES = (
    "node-initialize.yaml",
    "node-heartbeat-with-lease.yaml",
    "pod-ready.yaml",
    "pod-complete.yaml",
    "pod-delete.yaml",
)


def expected() -> Binaries:
    """Where build.sh puts things for the pinned versions."""
    d = versions.bin_dirs()
    k8s = d["kubernetes"]
    return Binaries(
        etcd=d["etcd"] / "etcd",
        kube_apiserver=k8s / "kube-apiserver",
        kube_controller_manager=k8s / "kube-controller-manager",
        kube_scheduler=k8s / "kube-scheduler",
        kwok=d["kwok"] / "kwok",
        kwok_stages=tuple(d["kwok"] / "stages" / s for s in STAGES),
    )


def missing(b: Binaries) -> list[Path]:
    """Files not yet built; empty means a warm start is possible."""
    paths = [b.etcd, b.kube_apiserver, b.kube_controller_manager, b.kube_scheduler, b.kwok]
    return [p for p in (*paths, *b.kwok_stages) if not p.is_file()]


def ensure_built(log: TextIO = sys.stderr) -> Binaries:
    """Return the binaries, running the (slow, cold) Go build only if something is missing."""
    b = expected()
    if missing(b):
        print(
            f"kubeprof-cluster: building control plane into {versions.cache_root()} "
            "(cold build: tens of minutes on 2 cores)",
            file=log,
            flush=True,
        )
        subprocess.run(["bash", str(versions.BUILD_SCRIPT)], check=True)
        still = missing(b)
        if still:
            raise FileNotFoundError(f"build.sh finished but these are missing: {still}")
    return b
