"""The few Kubernetes API calls the reconciler makes, through the `kubernetes` client.

Answers come back as the API server's JSON (`_preload_content=False`), not as the
client's model classes, so the reconciler and its tests deal only in plain dicts with
the API's own field names. Errors become `KubeError`; "absent" (404) and "already
exists" (409) are answers, not errors, where the reconciler expects them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kubeprof.operator.config import GROUP, PLURAL, VERSION

TIMEOUT_S = 30.0  # per request: a hung API server must not stall a reconcile pass forever
_T = TypeVar("_T")


class KubeError(RuntimeError):
    """A failed API call: a non-2xx answer (`status`), or none at all (`status` 0)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message[:300]}" if status else message[:300])
        self.status = status
        self.message = message


def _message(exc: ApiException) -> str:
    """The API server's own explanation (the Status object's message), else the reason."""
    try:
        return str(json.loads(exc.body or "")["message"])
    except (ValueError, KeyError, TypeError):
        return str(exc.body or exc.reason or "")


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call one API method; its answer as a dict; failures as KubeError."""
    try:
        resp = fn(*args, _preload_content=False, _request_timeout=TIMEOUT_S, **kwargs)
        raw = resp.data
    except ApiException as exc:
        raise KubeError(int(exc.status or 0), _message(exc)) from None
    except urllib3.exceptions.HTTPError as exc:
        raise KubeError(0, f"API server unreachable: {exc}") from exc
    return json.loads(raw) if raw else {}


def _absent_is_none(fn: Callable[[], _T]) -> _T | None:
    try:
        return fn()
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise


class Kube:
    """An authenticated API server connection, safe to use from several threads.

    Credentials come from the in-cluster ServiceAccount, else the kubeconfig. Each thread
    gets its own ApiClient (one urllib3 pool each) over the shared Configuration: the
    reconciler runs in kopf's handler threads, `session_exists` in the ingest's executor.
    """

    def __init__(self, kubeconfig: str | None = None) -> None:
        cfg = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException:
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        self._cfg = cfg
        self._local = threading.local()

    def _api(self) -> client.ApiClient:
        api = getattr(self._local, "api", None)
        if api is None:
            api = self._local.api = client.ApiClient(self._cfg)
        return api

    @property
    def _core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self._api())

    @property
    def _apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self._api())

    # -- pods and nodes ----------------------------------------------------------------------
    def list_pods(self, namespace: str, selector: str) -> list[dict]:
        return _call(self._core.list_namespaced_pod, namespace, label_selector=selector)["items"]

    def get_pod(self, namespace: str, name: str) -> dict | None:
        """One pod by name, listed (the operator may list pods, not get them); None: absent."""
        items = _call(
            self._core.list_namespaced_pod, namespace, field_selector=f"metadata.name={name}"
        )["items"]
        return items[0] if items else None

    def node_labels(self) -> dict[str, dict[str, str]]:
        items = _call(self._core.list_node)["items"]
        return {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in items}

    def node_kernels(self) -> dict[str, str]:
        """Node name -> the kernel release its kubelet reports (status.nodeInfo)."""
        items = _call(self._core.list_node)["items"]
        return {
            n["metadata"]["name"]: ((n.get("status") or {}).get("nodeInfo") or {}).get(
                "kernelVersion", ""
            )
            for n in items
        }

    # -- agents' credentials -----------------------------------------------------------------
    def token_review(self, token: str, audience: str) -> dict:
        """The API server's TokenReview status of `token` for `audience` (agent_identity)."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [audience]},
        }
        api = client.AuthenticationV1Api(self._api())
        return _call(api.create_token_review, body).get("status") or {}

    # -- why agent pods are missing ----------------------------------------------------------
    def daemonset_events(self, namespace: str, name: str) -> list[dict]:
        """Events about one DaemonSet (the DaemonSet controller's FailedCreate among them)."""
        return _call(
            self._core.list_namespaced_event,
            namespace,
            field_selector=f"involvedObject.kind=DaemonSet,involvedObject.name={name}",
        )["items"]

    # -- the admission policy guarding cross-namespace targets -------------------------------
    def admission_policy(self, name: str) -> tuple[dict | None, dict | None]:
        """The ValidatingAdmissionPolicy `name` and its binding of the same name (None: absent)."""
        api = client.AdmissionregistrationV1Api(self._api())
        return (
            _absent_is_none(lambda: _call(api.read_validating_admission_policy, name)),
            _absent_is_none(lambda: _call(api.read_validating_admission_policy_binding, name)),
        )

    # -- the session's Secret ----------------------------------------------------------------
    def get_secret(self, namespace: str, name: str) -> dict | None:
        return _absent_is_none(lambda: _call(self._core.read_namespaced_secret, name, namespace))

    def create_secret(self, namespace: str, obj: dict) -> dict | None:
        """Create the Secret; None when one of that name exists already (409)."""
        return self._create(self._core.create_namespaced_secret, namespace, obj)

    def delete_secret(self, namespace: str, name: str) -> bool:
        """Delete the Secret; False when there was none."""
        return (
            _absent_is_none(lambda: _call(self._core.delete_namespaced_secret, name, namespace))
            is not None
        )

    # -- the session's agent DaemonSet -------------------------------------------------------
    def list_daemonsets(self, namespace: str, selector: str) -> list[dict]:
        """DaemonSets matching a label selector (a session's agent shards)."""
        return _call(self._apps.list_namespaced_daemon_set, namespace, label_selector=selector)[
            "items"
        ]

    def get_daemonset(self, namespace: str, name: str) -> dict | None:
        return _absent_is_none(
            lambda: _call(self._apps.read_namespaced_daemon_set, name, namespace)
        )

    def create_daemonset(self, namespace: str, obj: dict) -> dict | None:
        """Create the DaemonSet; None when one of that name exists already (409)."""
        return self._create(self._apps.create_namespaced_daemon_set, namespace, obj)

    def patch_daemonset(self, namespace: str, name: str, patch: dict) -> dict:
        """JSON merge patch (RFC 7386): lists in `patch`, such as node affinity terms,
        replace the old lists whole."""
        return _call(
            self._apps.patch_namespaced_daemon_set,
            name,
            namespace,
            patch,
            _content_type="application/merge-patch+json",
        )

    def delete_daemonset(self, namespace: str, name: str) -> bool:
        """Delete the DaemonSet (its pods in the background); False when there was none."""
        return (
            _absent_is_none(
                lambda: _call(
                    self._apps.delete_namespaced_daemon_set,
                    name,
                    namespace,
                    propagation_policy="Background",
                )
            )
            is not None
        )

    # -- ProfilingSessions -------------------------------------------------------------------
    def session_exists(self, namespace: str, name: str) -> bool:
        api = client.CustomObjectsApi(self._api())
        return (
            _absent_is_none(
                lambda: _call(
                    api.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name
                )
            )
            is not None
        )

    @staticmethod
    def _create(method: Callable[..., Any], namespace: str, obj: dict) -> dict | None:
        try:
            return _call(method, namespace, obj)
        except KubeError as exc:
            if exc.status == 409:
                return None
            raise
