"""RBAC proven by use: the operator's e2e session tests run with nothing but the chart's
ServiceAccount (a TokenRequest token against the real API server), and a call outside the
chart's rules is refused by the API server.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.e2e import chart_cluster as cc
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster
from tests.support.chart import helm_built  # noqa: F401 - the fixture

# bpf: the child run's session tests profile with eBPF (see SESSION_TESTS).
pytestmark = [pytest.mark.e2e, pytest.mark.bpf, pytest.mark.usefixtures("helm_built")]

# The operator's e2e session tests: every Kubernetes call of kubeprof.operator.kube, and the
# operator process (kopf watches, status patches, events) through whole sessions.
SESSION_TESTS = [
    "test_operator.py",
    "test_operator_kube.py",
    "test_operator_targets.py",
    "test_operator_resilience.py",
    "test_light_deep.py",  # a light agent going deep takes no API right of the operator
    "test_agent_identity.py",  # TokenReview of agents' tokens (create tokenreviews)
]


@pytest.fixture(scope="module")
def sa_kubeconfig(k8s_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    h.apply_crd(k8s_cluster)
    cc.install_rbac(k8s_cluster)
    return cc.token_kubeconfig(k8s_cluster, tmp_path_factory.mktemp("sa") / "kubeconfig")


def _as_sa(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_token_is_the_service_accounts_and_grants_only_the_rules(sa_kubeconfig: Path):
    who = _as_sa(sa_kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
    assert who.stdout == f"system:serviceaccount:{cc.NAMESPACE}:{cc.SERVICE_ACCOUNT}", who
    # Calls outside the rules, refused by the API server's RBAC authorizer:
    listing = _as_sa(sa_kubeconfig, "get", "secrets", "-n", "kube-system")
    print(listing.stderr)
    assert listing.returncode != 0
    assert (
        'secrets is forbidden: User "system:serviceaccount:kubeprof-system:kp-kubeprof" '
        'cannot list resource "secrets" in API group "" in the namespace "kube-system"'
    ) in listing.stderr
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


@pytest.mark.timeout(1800)
def test_operator_session_tests_pass_with_only_the_charts_service_account(
    k8s_cluster: Cluster, sa_kubeconfig: Path
):
    if os.geteuid() != 0:
        pytest.skip("the operator session tests need root (cgroups, eBPF)")
    # The child's temporary folders (operator logs, PostgreSQL) under a folder of our own,
    # traversable by the unprivileged postgres user, as the e2e fixtures' own are.
    tmp = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-rbac-"))
    tmp.chmod(0o711)
    env = {
        **os.environ,
        "KUBEPROF_E2E_RUN_DIR": str(k8s_cluster.run_dir),
        h.OPERATOR_KUBECONFIG_ENV: str(sa_kubeconfig),
        "TMPDIR": str(tmp),
    }
    here = Path(__file__).resolve().parent
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rfEs",
            "-p",
            "no:cacheprovider",
            *[str(here / f) for f in SESSION_TESTS],
        ],
        cwd=h.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1700,
        check=False,
    )
    tail = r.stdout[-6000:] + r.stderr[-2000:]
    print(tail)
    assert r.returncode == 0, tail
    summary = r.stdout.strip().splitlines()[-1]
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", summary)}
    assert counts.get("passed", 0) >= 12 and set(counts) == {"passed"}, summary
    # Nothing was refused along the way either (kopf logs and carries on after a 403).
    logs = sorted(tmp.rglob("operator.log"))
    assert logs, "the session tests started no operator"
    for log in logs:
        text = log.read_text(errors="replace")
        # RBAC's refusal reads 'User "..." cannot VERB resource "R"'; kopf's own fallback
        # after a refused watch reads "Not enough permissions". (Other 403s, such as a
        # namespace being terminated, are not about the rules.)
        denied = re.findall(r'.*cannot \w+ resource ".*|.*Not enough permissions.*', text)
        assert not denied, f"{log}: refused calls:\n" + "\n".join(denied[:10])
    shutil.rmtree(tmp, ignore_errors=True)
