"""What a reconcile pass works with: the API calls it makes, the store, the registry."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.engine import Engine

from kubeprof.operator import light_deep
from kubeprof.operator.config import OperatorConfig
from kubeprof.operator.registry import Registry


class KubeOps(Protocol):
    """The API calls a pass needs (kube.Kube in production, a fake in unit tests).

    Reads of one object answer None when it is absent (404); creates answer None when it
    exists already (409); other failures raise kube.KubeError.
    """

    def list_pods(self, namespace: str, selector: str) -> list[dict]: ...
    def node_labels(self) -> dict[str, dict[str, str]]: ...
    def node_kernels(self) -> dict[str, str]: ...
    def daemonset_events(self, namespace: str, name: str) -> list[dict]: ...
    def admission_policy(self, name: str) -> tuple[dict | None, dict | None]: ...
    def get_secret(self, namespace: str, name: str) -> dict | None: ...
    def create_secret(self, namespace: str, obj: dict) -> dict | None: ...
    def delete_secret(self, namespace: str, name: str) -> bool: ...
    def list_daemonsets(self, namespace: str, selector: str) -> list[dict]: ...
    def get_daemonset(self, namespace: str, name: str) -> dict | None: ...
    def create_daemonset(self, namespace: str, obj: dict) -> dict | None: ...
    def patch_daemonset(self, namespace: str, name: str, patch: dict) -> dict: ...
    def delete_daemonset(self, namespace: str, name: str) -> bool: ...


@dataclass
class Context:
    """What a pass works with."""

    kube: KubeOps
    engine: Engine
    writer_registry: Registry
    config: OperatorConfig
    clock: Any = time.time
    light: light_deep.LightAgents | None = None  # deep-capable light agents (--light-token-file)
