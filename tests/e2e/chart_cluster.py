"""The rendered chart on the real test control plane: apply objects, and credentials of the
chart's ServiceAccount from the TokenRequest API (what a pod of the Deployment would get).

Every operator the e2e tests start holds such credentials (operator_identity), so each
session they run proves the chart's RBAC rules by use.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import Cluster
from tests.support import chart

NAMESPACE = "kubeprof-system"
RELEASE = "kp"
SERVICE_ACCOUNT = "kp-kubeprof"  # <release>-kubeprof
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def apply(cluster: Cluster, docs: list[dict[str, Any]]) -> str:
    """`kubectl apply` the objects (server-side validation); kubectl's answer."""
    r = cluster.kubectl(
        "apply", "--validate=strict", "-f", "-", stdin=yaml.safe_dump_all(docs), check=False
    )
    assert r.returncode == 0, f"the API server refused the chart's objects:\n{r.stderr}"
    return r.stdout


def install_rbac(
    cluster: Cluster, values: dict[str, Any] | None = None, release: str = RELEASE
) -> list[dict[str, Any]]:
    """The chart's ServiceAccount and RBAC objects, applied; returns them."""
    return _apply_rbac(cluster, chart.render(values, release=release, namespace=NAMESPACE))


def _apply_rbac(cluster: Cluster, rendered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    docs = [d for d in rendered if d["kind"] in RBAC_KINDS]
    apply(cluster, docs)
    return docs


# (cluster run folder) -> kubeconfig of the default values' ServiceAccount, made once per
# process: those objects are cluster-scoped or in NAMESPACE, which no test deletes.
_DEFAULT_IDENTITY: dict[str, Path] = {}


def operator_identity(cluster: Cluster, values: dict[str, Any]) -> Path:
    """A token kubeconfig of the operator ServiceAccount the chart makes for `values`, its
    RBAC objects installed. Other values than the defaults get a release of their own (its
    own ServiceAccount and roles), so no other operator's rights change under it."""
    if not chart.helm_path().exists():
        pytest.fail(f"the operator's chart identity needs helm: {chart.MISSING_HELM}")
    key = json.dumps(values, sort_keys=True)
    if not values and str(cluster.run_dir) in _DEFAULT_IDENTITY:
        return _DEFAULT_IDENTITY[str(cluster.run_dir)]
    release = f"{RELEASE}-{hashlib.sha256(key.encode()).hexdigest()[:8]}" if values else RELEASE
    rendered = chart.render(values, release=release, namespace=NAMESPACE)
    _apply_rbac(cluster, rendered)
    operator = next(
        d
        for d in rendered
        if d["kind"] == "Deployment"
        and d["metadata"]["labels"].get("app.kubernetes.io/component") == "operator"
    )
    account = operator["spec"]["template"]["spec"]["serviceAccountName"]
    path = cluster.run_dir / f"operator-{release}-{os.getpid()}.kubeconfig"
    token_kubeconfig(cluster, path, service_account=account)
    if not values:
        _DEFAULT_IDENTITY[str(cluster.run_dir)] = path
    return path


def token_kubeconfig(
    cluster: Cluster, path: Path, namespace: str = NAMESPACE, service_account: str = SERVICE_ACCOUNT
) -> Path:
    """A kubeconfig holding only a TokenRequest token of the ServiceAccount (no client cert)."""
    answer = cluster.api.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 7200},
        },
    )
    token = answer["status"]["token"]
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "e2e", "user": service_account}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path
