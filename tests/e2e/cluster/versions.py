"""Pinned component versions and the cache layout keyed by them.

build.sh carries the same pins; keep both in step (test_cluster_build checks it).
"""

import os
from pathlib import Path

KUBERNETES = "v1.36.3"
ETCD = "v3.6.16"
KWOK = "v0.8.0"

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[2]
BUILD_SCRIPT = HERE / "build.sh"


def cache_root() -> Path:
    """Cache root; overridable so CI can keep it outside the checkout."""
    env = os.environ.get("KUBEPROF_CLUSTER_CACHE")
    return Path(env) if env else REPO_ROOT / ".cache" / "kubeprof-cluster"


def bin_dirs() -> dict[str, Path]:
    """Binary folders, one per pinned version, so a version bump never reuses stale builds."""
    b = cache_root() / "bin"
    return {
        "kubernetes": b / f"kubernetes-{KUBERNETES}",
        "etcd": b / f"etcd-{ETCD}",
        "kwok": b / f"kwok-{KWOK}",
    }


def default_run_dir() -> Path:
    """Run folder of the hand-started cluster (tests use temporary ones)."""
    return cache_root() / "run"
