"""The injection webhook (kubeprof.operator.webhook) registered with the real kube-apiserver.

Registered by URL https://127.0.0.1:<port> with its own self-signed CA, selected the way the
chart selects (namespace or pod label ``kubeprof.dev/inject: "true"``, failurePolicy Ignore):
a pod created in an opted-in namespace is stored with the init container, environment and
volumes; a pod elsewhere is stored exactly as sent; with the webhook server stopped, pods
are still created (not injected).
"""

from __future__ import annotations

import base64
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeprof.operator.webhook import INIT_NAME, LABEL, PATH, InjectConfig, WebhookServer
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster
from tests.e2e.cluster.ports import pick

pytestmark = pytest.mark.e2e
CFG = InjectConfig(image="example.invalid/kubeprof-agent:e2e")


def _ossl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(d: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a serving cert for IP 127.0.0.1 signed by it."""
    (d / "ext.cnf").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n"
    )
    _ossl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=kubeprof-webhook-e2e-ca",
        cwd=d,
    )
    _ossl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "tls.key",
        "-out",
        "tls.csr",
        "-subj",
        "/CN=127.0.0.1",
        cwd=d,
    )
    _ossl(
        "x509",
        "-req",
        "-in",
        "tls.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "tls.crt",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
        cwd=d,
    )
    return d / "ca.crt", d / "tls.crt", d / "tls.key"


def webhook_config(name: str, port: int, ca: Path) -> str:
    """Two webhooks as in charts/kubeprof/templates/webhook.yaml: namespace or pod opt-in."""
    client = {
        "url": f"https://127.0.0.1:{port}{PATH}",
        "caBundle": base64.b64encode(ca.read_bytes()).decode(),
    }
    common = {
        "clientConfig": client,
        "failurePolicy": "Ignore",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
        "reinvocationPolicy": "Never",
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
            }
        ],
    }
    hooks = [
        {
            **common,
            "name": "namespace.inject.kubeprof.dev",
            "namespaceSelector": {"matchLabels": {LABEL: "true"}},
            "objectSelector": {
                "matchExpressions": [{"key": LABEL, "operator": "NotIn", "values": ["false"]}]
            },
        },
        {
            **common,
            "name": "pod.inject.kubeprof.dev",
            "namespaceSelector": {
                "matchExpressions": [{"key": LABEL, "operator": "NotIn", "values": ["true"]}]
            },
            "objectSelector": {"matchLabels": {LABEL: "true"}},
        },
    ]
    return json.dumps(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": hooks,
        }
    )


def pod_json(name: str, ns: str, labels: dict[str, str] | None = None) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {
                "containers": [
                    {"name": "main", "image": "python:3.12", "env": [{"name": "A", "value": "1"}]}
                ],
                "nodeSelector": {"kubeprof.dev/none": "x"},
            },
        }
    )


def create(cluster: Cluster, manifest: str) -> dict:
    return json.loads(cluster.kubectl("create", "-o", "json", "-f", "-", stdin=manifest).stdout)


@pytest.fixture
def namespaces(k8s_cluster: Cluster) -> Iterator[tuple[str, str]]:
    tag = uuid.uuid4().hex[:6]
    opted, plain = f"e2e-inject-{tag}", f"e2e-plain-{tag}"
    for ns in (opted, plain):
        k8s_cluster.kubectl("create", "namespace", ns)
    k8s_cluster.kubectl("label", "namespace", opted, f"{LABEL}=true")
    yield opted, plain
    for ns in (opted, plain):
        k8s_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_webhook_injects_opted_in_pods_only_and_never_blocks(
    k8s_cluster: Cluster, namespaces: tuple[str, str], tmp_path: Path
) -> None:
    opted, plain = namespaces
    ca, crt, key = make_certs(tmp_path)
    port = pick(1)[0]
    server = WebhookServer(CFG, "127.0.0.1", port, str(crt), str(key)).start()
    name = f"kubeprof-inject-{uuid.uuid4().hex[:6]}"
    try:
        k8s_cluster.kubectl("create", "-f", "-", stdin=webhook_config(name, port, ca))
        n = iter(range(1000))

        def injected() -> dict | None:  # the apiserver picks the config up asynchronously
            got = create(k8s_cluster, pod_json(f"probe-{next(n)}", opted))
            return got if got["spec"].get("initContainers") else None

        pod = h.poll(injected, 60, "webhook config in effect")
        init = pod["spec"]["initContainers"][0]
        assert init["name"] == INIT_NAME and init["image"] == CFG.image
        vols = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert "emptyDir" in vols["kubeprof-tracer"]
        assert vols["kubeprof-gpu-socket"]["hostPath"]["path"] == f"{CFG.socket_host_path}/rx"
        assert "emptyDir" in vols["kubeprof-gpu-ctl"]  # control sockets: the pod's own folder
        main = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in main["env"]}
        assert env["A"] == "1"
        assert env["PYTHONPATH"].startswith(CFG.site_dir + ":")
        assert env["KUBEPROF_GPU_SOCKET"] == CFG.socket and env["KUBEPROF_GPU_DORMANT"] == "1"
        uid = next(e for e in main["env"] if e["name"] == "KUBEPROF_POD_UID")
        assert uid["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
        mounts = {m["name"]: m for m in main["volumeMounts"]}
        assert {"kubeprof-tracer", "kubeprof-gpu-socket", "kubeprof-gpu-ctl"} <= set(mounts)
        assert mounts["kubeprof-gpu-socket"]["readOnly"] is True  # no pod can plant a receiver

        # Another namespace: stored as sent (no init container, env untouched).
        other = create(k8s_cluster, pod_json("plain", plain))
        assert not other["spec"].get("initContainers")
        assert [e["name"] for e in other["spec"]["containers"][0]["env"]] == ["A"]
        assert "kubeprof-tracer" not in json.dumps(other)
        # A pod that opts in by its own label, in a namespace that did not.
        own = create(k8s_cluster, pod_json("own", plain, {LABEL: "true"}))
        assert own["spec"]["initContainers"][0]["name"] == INIT_NAME
        # A pod that opts out in an opted-in namespace.
        out = create(k8s_cluster, pod_json("out", opted, {LABEL: "false"}))
        assert not out["spec"].get("initContainers")

        # Webhook down: pod creation still succeeds (failurePolicy Ignore), uninjected.
        server.stop()
        down = create(k8s_cluster, pod_json("while-down", opted))
        assert down["metadata"]["name"] == "while-down"
        assert not down["spec"].get("initContainers")
    finally:
        server.stop()
        k8s_cluster.kubectl("delete", "mutatingwebhookconfiguration", name, check=False)
