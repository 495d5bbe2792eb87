"""The chart's claimed Kubernetes range (Chart.yaml kubeVersion) is true at each minor:
`helm template --kube-version 1.M.0` renders, and renders the ValidatingAdmissionPolicy
(admissionregistration.k8s.io/v1, served from 1.30) only where that API exists; below 1.30
a cross-namespace install is refused naming the value to change, since the operator would
refuse every cross-namespace session there anyway."""

from __future__ import annotations

import pytest
import yaml

from tests.support import chart

pytestmark = pytest.mark.usefixtures("helm_built")
NEWEST = 36  # the control plane the e2e tests run (tests/e2e/cluster/versions.py)
POLICY_API = 30  # ValidatingAdmissionPolicy v1 is served from Kubernetes 1.30


def template(minor: int, *sets: str) -> tuple[int, list[dict], str]:
    args = ["template", "kp", str(chart.CHART), "--kube-version", f"1.{minor}.0"]
    for s in sets:
        args += ["--set", s]
    r = chart.helm(*args)
    docs = [d for d in yaml.safe_load_all(r.stdout) if d] if r.returncode == 0 else []
    return r.returncode, docs, r.stderr


def test_the_claimed_range_starts_at_1_27() -> None:
    meta = yaml.safe_load((chart.CHART / "Chart.yaml").read_text())
    assert meta["kubeVersion"] == ">=1.27.0-0"
    rc, _, err = template(26)
    assert rc != 0 and "kubeVersion" in err, err


@pytest.mark.parametrize("minor", range(27, NEWEST + 1))
def test_each_claimed_minor_renders_only_apis_it_serves(minor: int) -> None:
    rc, docs, err = template(minor)
    assert rc == 0, err
    kinds = {(d["apiVersion"], d["kind"]) for d in docs}
    policy = {
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
    }
    if minor >= POLICY_API:
        assert policy <= kinds
    else:
        assert not policy & kinds, kinds
    assert ("apps/v1", "Deployment") in kinds


@pytest.mark.parametrize("minor", [27, 29])
def test_cross_namespace_below_1_30_is_refused_naming_the_value(minor: int) -> None:
    rc, _, err = template(minor, "operator.allowCrossNamespace=true")
    assert rc != 0
    assert "operator.allowCrossNamespace" in err and "Kubernetes >= 1.30" in err, err
    rc, _, err = template(POLICY_API, "operator.allowCrossNamespace=true")
    assert rc == 0, err
