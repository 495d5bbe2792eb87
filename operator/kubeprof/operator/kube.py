"""The few Kubernetes API calls the reconciler makes, as plain JSON over HTTPS.

Credentials come from the kubeconfig or the in-cluster ServiceAccount through the
`kubernetes` package's loaders; requests themselves are small urllib calls returning
dicts, so the reconciler and its tests deal only in plain objects.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from kubeprof.operator.config import GROUP, PLURAL, VERSION


class KubeError(RuntimeError):
    """A non-2xx answer from the API server."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


class Kube:
    """An authenticated API server connection (thread-safe: one request per call)."""

    def __init__(self, kubeconfig: str | None = None) -> None:
        from kubernetes import client, config

        cfg = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException:
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        self._cfg = cfg
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.verify_ssl else \
            ssl._create_unverified_context()
        if cfg.cert_file:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
        self._ctx = ctx
        self.host = cfg.host.rstrip("/")

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json", timeout: float = 30) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.host + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        token = self._cfg.get_api_key_with_prefix("authorization")
        if token:
            req.add_header("Authorization", token)
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raise KubeError(e.code, e.read().decode(errors="replace")) from None
        return json.loads(raw) if raw else {}

    def get_or_none(self, path: str) -> dict | None:
        try:
            return self.request("GET", path)
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    # -- objects the reconciler uses ---------------------------------------------------------
    def list_pods(self, namespace: str, selector: str) -> list[dict]:
        q = urllib.parse.urlencode({"labelSelector": selector})
        return self.request("GET", f"/api/v1/namespaces/{namespace}/pods?{q}")["items"]

    def node_labels(self) -> dict[str, dict[str, str]]:
        items = self.request("GET", "/api/v1/nodes")["items"]
        return {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in items}

    def get_secret(self, namespace: str, name: str) -> dict | None:
        return self.get_or_none(f"/api/v1/namespaces/{namespace}/secrets/{name}")

    def create(self, path: str, obj: dict) -> dict | None:
        """POST obj; None when it already exists (409)."""
        try:
            return self.request("POST", path, obj)
        except KubeError as e:
            if e.status == 409:
                return None
            raise

    def get_daemonset(self, namespace: str, name: str) -> dict | None:
        return self.get_or_none(f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}")

    def patch_daemonset(self, namespace: str, name: str, patch: dict) -> dict:
        return self.request("PATCH", f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}",
                            patch, content_type="application/merge-patch+json")

    def delete_daemonset(self, namespace: str, name: str) -> bool:
        try:
            self.request("DELETE", f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}",
                         {"propagationPolicy": "Background"})
        except KubeError as e:
            if e.status == 404:
                return False
            raise
        return True

    def session_exists(self, namespace: str, name: str) -> bool:
        return self.get_or_none(
            f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}") is not None
