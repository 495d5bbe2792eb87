"""Which namespaces a session may profile: pure decisions, the API reads are the caller's.

A ProfilingSession profiles pods in its own namespace. Targeting another namespace needs
two things:

1. the operator was started with `--allow-cross-namespace` (off by default), and
2. the user who created the session may list pods in the target namespace.

The operator never sees who created an object, so (2) is checked at admission time, by the
API server itself: the ValidatingAdmissionPolicy in `crds/profilingsession-admission.yaml`
asks the cluster's authorizer (`authorizer...check('list')`, the decision a
SubjectAccessReview for the requesting user returns) and refuses the create otherwise. The
spec is immutable, so the target checked at creation is the target for the session's life.
Here the operator only verifies that the policy and its Deny binding are installed and were
in force before the session was created; a session that cannot show that is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

POLICY = "kubeprof-target-namespace"  # ValidatingAdmissionPolicy and its binding
POLICY_FILE = "crds/profilingsession-admission.yaml"
# The API server's policy informer needs a moment to see a new binding.
POLICY_SETTLE_S = 2.0


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a session may not profile its target, and what to do (for .status)."""

    reason: str
    message: str


def _created(obj: Mapping[str, Any] | None) -> float | None:
    text = ((obj or {}).get("metadata") or {}).get("creationTimestamp")
    if not text:
        return None
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


def policy_problem(
    policy: Mapping[str, Any] | None,
    binding: Mapping[str, Any] | None,
    session_created: float | None,
) -> str | None:
    """Why the admission check cannot vouch for a session created at `session_created`."""
    if policy is None or binding is None:
        missing = "ValidatingAdmissionPolicy" if policy is None else "binding"
        return (
            f"the admission policy {POLICY!r} that checks the creator may list pods in "
            f"the target namespace is not installed (its {missing} is missing): "
            f"kubectl apply -f {POLICY_FILE}, then re-create the session"
        )
    spec = binding.get("spec") or {}
    if spec.get("policyName") != POLICY or "Deny" not in (spec.get("validationActions") or []):
        return (
            f"the binding {POLICY!r} does not enforce the policy (it must name policyName "
            f"{POLICY!r} with validationActions [Deny]): re-apply {POLICY_FILE}"
        )
    in_force = max(_created(policy) or 0.0, _created(binding) or 0.0) + POLICY_SETTLE_S
    if session_created is None or session_created < in_force:
        return (
            f"the session was created before the admission policy {POLICY!r} was in "
            "force, so nobody checked that its creator may list pods there: re-create "
            "the session"
        )
    return None


def check(
    session: Mapping[str, Any],
    target_namespace: str,
    allow_cross_namespace: bool,
    policy: Mapping[str, Any] | None = None,
    binding: Mapping[str, Any] | None = None,
) -> Refusal | None:
    """None when the session may profile `target_namespace`, else the Refusal to report.

    `policy` and `binding` are the admission objects as read from the API server (None when
    absent); they are only looked at for a cross-namespace target.
    """
    own = session["metadata"]["namespace"]
    if target_namespace == own:
        return None
    if not allow_cross_namespace:
        return Refusal(
            "CrossNamespaceNotAllowed",
            f"spec.target.namespace {target_namespace!r} is not the session's namespace "
            f"{own!r}, and this operator profiles pods only in a session's own namespace: "
            f"create the session in namespace {target_namespace!r}, or have the cluster "
            "administrator start the operator with --allow-cross-namespace (users then need "
            f"the right to list pods in {target_namespace!r})",
        )
    problem = policy_problem(policy, binding, _created(session))
    if problem:
        return Refusal(
            "CrossNamespaceUnverified",
            f"spec.target.namespace {target_namespace!r} is another namespace, but {problem}",
        )
    return None
