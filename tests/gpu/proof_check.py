"""What the H200 agent proof judges, shared by the device run and the CI replay tests.

A proof phase is one ProfilingSession: pods running ``examples/gpu_pod_truth.py`` in kubelet-
named cgroups with the webhook's environment, a real ``kubeprof agent`` switching their
tracers on and off, batches through the real ingest into the store. These functions read a
stored session back (the queries the operator's aggregation uses) and compare each pod's
figure with the workload's own CUDA-event truth over the same window. No torch needed.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection

from kubeprof.analysis import session_summary as ss
from kubeprof.analysis.pod_idle import pod_idle
from kubeprof.model import FrameKind, GpuActivity
from kubeprof.storage import queries as q


def truth_line(stdout: str) -> dict[str, Any] | None:
    """The workload's KUBEPROF_TRUTH line, parsed (None when it printed none)."""
    for line in stdout.splitlines():
        if line.startswith("KUBEPROF_TRUTH "):
            return json.loads(line.split(" ", 1)[1])
    return None


def truth_over(steps: Sequence[Sequence[float]], start_ns: int, end_ns: int) -> float | None:
    """The workload's own idle over its steps that start inside [start_ns, end_ns).

    Steps are ``[host_start_ns, gpu_start_ms, busy_ms]`` (the last entry only closes the
    span of the one before): busy summed over those steps, divided by the span from the
    first one's start event to the start event of the step after the last (GPU clock).
    """
    idx = [i for i, s in enumerate(steps) if start_ns <= s[0] < end_ns and i + 1 < len(steps)]
    if len(idx) < 2:
        return None
    span = steps[idx[-1] + 1][1] - steps[idx[0]][1]
    busy = sum(steps[i][2] for i in idx)
    return 1.0 - busy / span if span > 0 else None


def read_batches(path: Path) -> Iterator[bytes]:
    """The request bodies the agent posted (one JSON document a line, gzip'd file)."""
    with gzip.open(path, "rb") as f:
        for line in f:
            if line.strip():
                yield line.rstrip(b"\n")


def python_frames(a: GpuActivity) -> list[tuple[str, int, str]]:
    """(file, line, function) of an activity's Python frames, root first."""
    return [(f.file, f.line, f.name) for f in a.stack if f.kind is FrameKind.PYTHON]


def pod_report(conn: Connection, session_id: int, uid: str) -> dict[str, Any]:
    """One pod as the store holds it: its processes, kernels, launch stacks, GPU idle."""
    pid_pods = q.pid_pods(conn, session_id)
    acts = q.gpu_activities_by_node(conn, session_id, stacks=True)
    metrics = q.gpu_metrics_by_node(conn, session_id)
    users = q.gpu_users(conn, session_id)
    fig = pod_idle(uid, pid_pods, acts, metrics, users)
    pids = sorted(pid for (_node, pid), u in pid_pods.items() if u == uid)
    kernels = [
        a
        for node, xs in acts.items()
        for a in xs
        if a.kind == "kernel" and pid_pods.get((node, a.pid)) == uid
    ]
    by_stack: dict[str, int] = {}
    for a in kernels:
        label = ss.stack_label(a.stack) if a.stack else "[no stack]"
        by_stack[label] = by_stack.get(label, 0) + (a.end_ns - a.start_ns)
    top = sorted(by_stack.items(), key=lambda kv: -kv[1])[:5]
    return {
        "uid": uid,
        "pids": pids,
        "kernels": len(kernels),
        "kernels_with_python_stack": sum(1 for a in kernels if python_frames(a)),
        "kernel_pids": sorted({a.pid for a in kernels}),
        "first_kernel_ns": min((a.start_ns for a in kernels), default=None),
        "last_kernel_ns": max((a.end_ns for a in kernels), default=None),
        "gpu_idle": fig.ratio,
        "gpu_idle_source": fig.source,
        "gpu_idle_missing": fig.missing,
        "gpu_idle_detail": fig.detail,
        "window": list(fig.window),
        "top_stacks_ns": top,
    }


def kernels_of(conn: Connection, session_id: int, uid: str) -> list[GpuActivity]:
    """The pod's kernel records with their stacks."""
    pid_pods = q.pid_pods(conn, session_id)
    acts = q.gpu_activities_by_node(conn, session_id, stacks=True)
    return [
        a
        for node, xs in acts.items()
        for a in xs
        if a.kind == "kernel" and pid_pods.get((node, a.pid)) == uid
    ]
