"""The rendered chart on the real test control plane: apply objects, and credentials of the
chart's ServiceAccount from the TokenRequest API (what a pod of the Deployment would get).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def install_rbac(cluster: Cluster, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart's ServiceAccount and RBAC objects, applied; returns them."""
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    docs = [
        d
        for d in chart.render(values, release=RELEASE, namespace=NAMESPACE)
        if d["kind"] in RBAC_KINDS
    ]
    apply(cluster, docs)
    return docs


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
