"""CRDs work end to end: kubectl creates a CRD and an object, the Python client reads it."""

import time
import uuid

import pytest
from kubernetes import client

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "e2e.kubeprof.dev", "v1alpha1", "widgets"
CRD = f"""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {PLURAL}.{GROUP}
spec:
  group: {GROUP}
  scope: Namespaced
  names: {{plural: {PLURAL}, singular: widget, kind: Widget}}
  versions:
  - name: {VERSION}
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              gpus: {{type: integer}}
              target: {{type: string}}
"""
OBJ = f"""
apiVersion: {GROUP}/{VERSION}
kind: Widget
metadata:
  name: w1
  namespace: {{ns}}
spec:
  gpus: 8
  target: nvidia.com/gpu.present=true
"""


@pytest.fixture(scope="module")
def crd(k8s_cluster: Cluster):
    k8s_cluster.kubectl("apply", "-f", "-", stdin=CRD)
    k8s_cluster.kubectl(
        "wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}", "--timeout=60s"
    )
    yield
    k8s_cluster.kubectl("delete", "crd", f"{PLURAL}.{GROUP}", "--wait=false", check=False)


def test_custom_object_roundtrip(k8s_cluster: Cluster, k8s_client, crd) -> None:
    ns = f"e2e-crd-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("create", "namespace", ns)
    try:
        # Discovery can lag Established by a moment; retry the create briefly.
        for _ in range(20):
            r = k8s_cluster.kubectl("apply", "-f", "-", stdin=OBJ.format(ns=ns), check=False)
            if r.returncode == 0:
                break
            time.sleep(0.5)
        assert r.returncode == 0, r.stderr
        api = client.CustomObjectsApi(k8s_client)
        got = api.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "w1")
        assert got["spec"] == {"gpus": 8, "target": "nvidia.com/gpu.present=true"}
        assert got["metadata"]["uid"]

        # And the other way round: created by the Python client, seen by kubectl.
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Widget",
            "metadata": {"name": "w2"},
            "spec": {"gpus": 1},
        }
        api.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
        out = k8s_cluster.kubectl("get", PLURAL, "-n", ns, "-o", "name").stdout.split()
        assert sorted(out) == [f"widget.{GROUP}/w1", f"widget.{GROUP}/w2"]
    finally:
        k8s_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
