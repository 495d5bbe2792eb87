"""The session's word on its pods' injected GPU tracers: `.status.gpuTracers` and the
KernelTracing condition.

The node agents report what each pod's dormant tracer answered (`Batch.gpu_tracers`, stored
per control socket in `gpu_tracers`): switched on for the session, or refused with the
tracer's own reason (an unsupported Python, no GPU or driver, no libcupti, another CUDA
major's libcupti already loaded, a socket folder it cannot write, another pod's process
behind the socket). Pure: rows in, the compact status part out, bounded so the CR stays
small.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubeprof.model import GpuTracerState

MAX_PODS = 20  # pods listed in .status.gpuTracers.pods (refusing pods first)
MAX_REASONS = 3  # distinct reasons kept per pod
MAX_REASON_CHARS = 300


def summarize(states: Sequence[GpuTracerState], pod_names: Mapping[str, str]) -> dict[str, Any]:
    """``{"traced": N, "refused": M, "pods": [{pod, traced, refused, reasons}]}``.

    A process counts as traced once a session's agent switched it on (state on or off);
    refused ones carry the tracer's reason, the same line as in the pod's log.
    """
    per_pod: dict[str, dict[str, Any]] = {}
    for s in states:
        pod = per_pod.setdefault(
            s.pod_uid,
            {"pod": pod_names.get(s.pod_uid, s.pod_uid), "traced": 0, "refused": 0, "reasons": []},
        )
        if s.state == "refused":
            pod["refused"] += 1
            why = s.reason[:MAX_REASON_CHARS]
            if why not in pod["reasons"] and len(pod["reasons"]) < MAX_REASONS:
                pod["reasons"].append(why)
        else:
            pod["traced"] += 1
    pods = sorted(per_pod.values(), key=lambda p: (-p["refused"], p["pod"]))
    out: dict[str, Any] = {
        "traced": sum(p["traced"] for p in pods),
        "refused": sum(p["refused"] for p in pods),
        "pods": [{k: v for k, v in p.items() if k != "reasons" or v} for p in pods[:MAX_PODS]],
    }
    if len(pods) > MAX_PODS:
        out["podsNotListed"] = len(pods) - MAX_PODS
    return out


def condition_parts(summary: Mapping[str, Any]) -> tuple[bool, str, str]:
    """(ok, reason, message) of the KernelTracing condition for a session whose agents
    switch injected tracers."""
    traced, refused = summary["traced"], summary["refused"]
    pods = summary["pods"]
    first = next((f"{p['pod']}: {p['reasons'][0]}" for p in pods if p.get("reasons")), "")
    if traced and refused:
        return (
            True,
            "PartlyTraced",
            (f"{traced} process(es) traced; {refused} refused, e.g. {first}"),
        )
    if traced:
        n = sum(1 for p in pods if p["traced"])
        return True, "Traced", f"{traced} process(es) in {n} pod(s) traced"
    if refused:
        return False, "TracersRefused", f"{refused} process(es) refused, e.g. {first}"
    return (
        False,
        "NoTracerFound",
        (
            "no injected tracer answered yet: label the pods' namespace (or the pods) "
            "kubeprof.dev/inject=true and re-create them, and run Python 3.10-3.13"
        ),
    )
