"""RBAC proven by use: every operator the e2e tests start holds nothing but the chart's
ServiceAccount (a TokenRequest token against the real API server; operator_helpers.Operator),
and fails its test when the API server refused it a call. Here: that this stays the
default, and that a call outside the chart's rules is refused by the API server.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.e2e import chart_cluster as cc
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster
from tests.support.chart import helm_built  # noqa: F401 - the fixture

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("helm_built")]

SA_USER = f"system:serviceaccount:{cc.NAMESPACE}:{cc.SERVICE_ACCOUNT}"


@pytest.fixture(scope="module")
def sa_kubeconfig(k8s_cluster: Cluster) -> Path:
    h.apply_crd(k8s_cluster)
    return cc.operator_identity(k8s_cluster, {})


def _as_sa(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_token_is_the_service_accounts_and_grants_only_the_rules(sa_kubeconfig: Path):
    assert _whoami(sa_kubeconfig) == SA_USER
    # Calls outside the rules, refused by the API server's RBAC authorizer:
    listing = _as_sa(sa_kubeconfig, "get", "secrets", "-n", "kube-system")
    print(listing.stderr)
    assert listing.returncode != 0
    assert (
        'secrets is forbidden: User "system:serviceaccount:kubeprof-system:kp-kubeprof" '
        'cannot list resource "secrets" in API group "" in the namespace "kube-system"'
    ) in listing.stderr
    # ... and the API server's refusal is what fails an operator's test (its log, at stop).
    assert h.refusals(listing.stderr)
    deploy = _as_sa(
        sa_kubeconfig, "create", "deployment", "x", "-n", "default", "--image=registry.invalid/x:0"
    )
    assert deploy.returncode != 0 and 'cannot create resource "deployments"' in deploy.stderr
    pod_delete = _as_sa(sa_kubeconfig, "auth", "can-i", "delete", "pods", "-A")
    assert pod_delete.stdout.strip() == "no"
    # Cross-namespace sessions are off by default: no right to read the admission policy.
    policy = _as_sa(
        sa_kubeconfig,
        "auth",
        "can-i",
        "get",
        "validatingadmissionpolicies.admissionregistration.k8s.io/kubeprof-target-namespace",
    )
    assert policy.stdout.strip() == "no"
    for verb, res in (
        ("create", "daemonsets.apps"),
        ("list", "daemonsets.apps"),
        ("get", "secrets"),
        ("patch", "profilingsessions.kubeprof.dev/status"),
        ("list", "nodes"),
        ("list", "events"),
        ("create", "tokenreviews.authentication.k8s.io"),
    ):
        r = _as_sa(sa_kubeconfig, "auth", "can-i", verb, res, "-A")
        assert r.stdout.strip() == "yes", (verb, res, r.stdout, r.stderr)


def test_the_e2e_operators_run_as_the_charts_service_account(k8s_cluster: Cluster, tmp_path: Path):
    """What proves the chart's rules by use: an operator started the default way holds only
    the chart's ServiceAccount, not the cluster's admin (whose calls are never refused)."""
    op = h.Operator(k8s_cluster, "postgresql+psycopg://unused", tmp_path)
    assert _whoami(op.kubeconfig()) == SA_USER


def _whoami(kubeconfig: Path) -> str:
    r = _as_sa(kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
    assert r.returncode == 0, r.stderr
    return r.stdout
