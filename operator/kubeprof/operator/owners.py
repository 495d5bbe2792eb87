"""Owner references: how an object the operator makes says which kubeprof object owns it,
so Kubernetes deletes it with its owner (a session's DaemonSets and Secret, a policy's
sessions)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubeprof.operator.config import GROUP, VERSION


def reference(kind: str, owner: Mapping[str, Any], *, block_deletion: bool) -> dict[str, Any]:
    """A controller reference to the kubeprof object `kind` whose metadata is `owner`.

    apiVersion comes from the CRD, not the owner's body, so the reference is valid even
    for a partial one. `block_deletion`: the owner's foreground deletion waits for this
    object.
    """
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "name": owner["name"],
        "uid": owner["uid"],
        "controller": True,
        "blockOwnerDeletion": block_deletion,
    }


def adopt(obj: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """`obj` with `ref` among its owner references (once: not again for the same owner).

    Not `kopf.adopt`: that would also copy the owner's labels onto the child, and the
    children's names and namespace are set by their builders already.
    """
    refs = obj.setdefault("metadata", {}).setdefault("ownerReferences", [])
    if not any(r.get("uid") == ref["uid"] for r in refs):
        refs.append(ref)
    return obj
