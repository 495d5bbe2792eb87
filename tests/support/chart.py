"""Render charts/kubeprof with the pinned helm, and read its PrometheusRule for promtool.

helm is built from the Go module proxy by tests/e2e/cluster/build_helm.sh into the same
version-keyed cache as the control plane (`make cluster-build` / `make helm-build`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster.versions import cache_root

HELM_VERSION = "v4.3.2"  # build_helm.sh carries the same pin (test_chart checks it)
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kubeprof"
BUILD_SCRIPT = ROOT / "tests" / "e2e" / "cluster" / "build_helm.sh"
MISSING_HELM = (
    f"helm {HELM_VERSION} is not built: run make helm-build ({BUILD_SCRIPT.relative_to(ROOT)})"
)

# The sessions ClusterRole's rules the light agent's ProfilingPolicy adds (and only it).
POLICY_RULES = [
    {
        "apiGroups": ["kubeprof.dev"],
        "resources": ["profilingsessions"],
        "verbs": ["create", "delete"],
    },
    {
        "apiGroups": ["kubeprof.dev"],
        "resources": ["profilingpolicies"],
        "verbs": ["get", "list", "watch", "patch"],
    },
    {"apiGroups": ["kubeprof.dev"], "resources": ["profilingpolicies/status"], "verbs": ["patch"]},
]


def helm_path() -> Path:
    return cache_root() / "bin" / f"helm-{HELM_VERSION}" / "helm"


def promtool_path() -> Path | None:
    found = shutil.which("promtool")
    return Path(found) if found else None


def helm(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the pinned helm with a private, empty config/cache (no repositories, no plugins)."""
    home = ROOT / ".cache" / "helm-home"
    env = {
        **os.environ,
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    return subprocess.run(
        [str(helm_path()), *args], input=stdin, capture_output=True, text=True, env=env, check=False
    )


def render(
    values: dict[str, Any] | None = None, *, release: str = "kp", namespace: str = "kubeprof-system"
) -> list[dict[str, Any]]:
    """`helm template` with `values` (as a values file); the rendered objects."""
    r = helm(
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--values",
        "-",
        stdin=json.dumps(values or {}),
    )
    if r.returncode != 0:
        raise RenderError(r.stderr.strip())
    return [d for d in yaml.safe_load_all(r.stdout) if d]


class RenderError(RuntimeError):
    """helm refused the values (schema, or a `required`/`fail` in a template)."""


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    hits = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(hits) == 1, f"{len(hits)} {kind} objects named {name!r} rendered"
    return hits[0]


def rules_file(docs: list[dict[str, Any]], path: Path) -> Path:
    """The rendered PrometheusRule's spec as a plain Prometheus rules file."""
    path.write_text(yaml.safe_dump(find(docs, "PrometheusRule")["spec"], sort_keys=False))
    return path


@pytest.fixture(scope="session")
def helm_built() -> None:
    """Fails (not skips) when helm is missing: `make chart` and `make test` build it."""
    if not helm_path().exists():
        pytest.fail(MISSING_HELM)
