"""charts/kubeprof's injection webhook (templates/webhook.yaml) agrees with the operator."""

from __future__ import annotations

from typing import Any

import pytest

from kubeprof.operator.main import build_parser
from kubeprof.operator.webhook import LABEL, PATH
from tests.support import chart
from tests.support.chart import helm_built  # noqa: F401 - the fixture

pytestmark = pytest.mark.usefixtures("helm_built")
ON: dict[str, Any] = {"webhook": {"enabled": True, "caBundle": "Q0E=", "port": 9555}}


def _env(docs: list[dict[str, Any]]) -> dict[str, Any]:
    c = chart.find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in c["env"]}


def test_off_by_default() -> None:
    docs = chart.render()
    assert not [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    assert "KUBEPROF_WEBHOOK_TLS_CERT" not in _env(docs)


def test_enabled_webhook_is_ignore_and_selected_and_reaches_the_operator() -> None:
    docs = chart.render(ON)
    mwc = chart.find(docs, "MutatingWebhookConfiguration")
    hooks = {h["name"]: h for h in mwc["webhooks"]}
    assert set(hooks) == {"namespace.inject.kubeprof.dev", "pod.inject.kubeprof.dev"}
    for h in hooks.values():
        assert h["failurePolicy"] == "Ignore"
        assert h["clientConfig"]["service"]["path"] == PATH
        assert h["clientConfig"]["caBundle"] == "Q0E="
        assert h["rules"][0]["resources"] == ["pods"]
    ns_hook = hooks["namespace.inject.kubeprof.dev"]
    assert ns_hook["namespaceSelector"] == {"matchLabels": {LABEL: "true"}}
    assert hooks["pod.inject.kubeprof.dev"]["objectSelector"] == {"matchLabels": {LABEL: "true"}}
    env = _env(docs)
    args = build_parser().parse_args(
        [
            "--webhook-listen",
            env["KUBEPROF_WEBHOOK_LISTEN"],
            "--webhook-tls-cert",
            env["KUBEPROF_WEBHOOK_TLS_CERT"],
        ]
    )
    assert args.webhook_listen.endswith(":9555")
    pod = chart.find(docs, "Deployment")["spec"]["template"]["spec"]
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert env["KUBEPROF_WEBHOOK_TLS_CERT"].rsplit("/", 1)[0] in mounts
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["webhook-tls"]["secret"]["secretName"] == "kp-kubeprof-webhook-tls"
    svc = chart.find(docs, "Service", "kp-kubeprof")
    assert {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"} in svc[
        "spec"
    ]["ports"]


def test_cert_manager_issues_the_cert_and_injects_the_ca() -> None:
    docs = chart.render({"webhook": {"enabled": True, "certManager": {"enabled": True}}})
    cert = chart.find(docs, "Certificate")
    assert cert["spec"]["secretName"] == "kp-kubeprof-webhook-tls"
    assert cert["spec"]["dnsNames"] == ["kp-kubeprof.kubeprof-system.svc"]
    mwc = chart.find(docs, "MutatingWebhookConfiguration")
    assert mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        "kubeprof-system/kp-kubeprof-inject"
    )


def test_enabled_without_a_ca_fails_naming_the_fix() -> None:
    with pytest.raises(Exception, match=r"webhook\.caBundle"):
        chart.render({"webhook": {"enabled": True}})
