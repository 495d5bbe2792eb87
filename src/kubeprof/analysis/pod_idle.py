"""GPU idle of each pod from that pod's own records: CUPTI where its tracer was on, else NVML.

A GPU shared by several pods (time-slicing, MPS, MIG) has one device-wide idle figure, but
each pod's figure must be its own: the share of the pod's traced window in which none of the
pod's kernels ran. Kernel records carry the process that launched them, so a pod's figure is
``gpu_idle.headline`` over the kernels of the pod's processes alone (same definition as the
session's headline: steady state of the pod's own loop). Only a pod whose processes sent no
kernel (no tracer was on in it) falls back to NVML, labelled ``nvml``: NVML's per-process SM
utilisation of its processes (``nvml_idle``, the light agent's definition), or, where NVML
gave none, the device-wide utilisation of a GPU that this pod alone used. A pod with neither
gets no figure and a sentence saying what is missing; never a 0 % or 100 % made up from
absent data.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from kubeprof.analysis import gpu_idle, nvml_idle
from kubeprof.analysis.gpu_timeline import Interval
from kubeprof.model import GpuActivity, GpuMetricSample

PROC_SM_METRIC = "proc_sm_util_pct"  # NVML per-process SM utilisation (nvml.py)
PROC_MEM_METRIC = "proc_mem_used_bytes"  # one row per process in NVML's running list


@dataclass(frozen=True, slots=True)
class PodIdle:
    """One pod's GPU idle figure, where it comes from, or why there is none."""

    ratio: float | None  # 0..1; None when `missing` says why
    source: str  # "cupti", "nvml", or "" without a figure
    missing: str = ""  # what is missing, when ratio is None
    kernels: int = 0  # kernel records of this pod's processes
    window: Interval = (0, 0)  # the traced window the CUPTI figure covers (records' clock)
    detail: str = ""  # how the NVML figure was made (per-process or device-wide)


Key = tuple[str, int]  # (node, pid)


def pod_idle(
    uid: str,
    pid_pods: Mapping[Key, str],
    activities: Mapping[str, Sequence[GpuActivity]],
    metrics: Mapping[str, Sequence[GpuMetricSample]],
    users: Collection[tuple[str, int, int]],
) -> PodIdle:
    """The figure of pod `uid` from per-node activities and metrics.

    `pid_pods` maps each known (node, pid) to its pod; `users` holds (node, device, pid) of
    every process seen on a GPU (kernel records or NVML process rows).
    """
    pids = {key for key, u in pid_pods.items() if u == uid}
    if not pids:
        return PodIdle(None, "", "no process of this pod was found on its node")
    by_node: dict[str, list[GpuActivity]] = {}
    for node, acts in activities.items():
        mine = [a for a in acts if (node, a.pid) in pids]
        if mine:
            by_node[node] = mine
    kernels = sum(1 for acts in by_node.values() for a in acts if a.kind == "kernel")
    if kernels:
        figs = [f for n in sorted(by_node) if (f := gpu_idle.headline(by_node[n])) is not None]
        fig = gpu_idle.combine(figs)
        if fig is not None and fig.source == gpu_idle.CUPTI:
            span = (fig.window.start_ns, fig.window.end_ns)
            return PodIdle(fig.ratio, gpu_idle.CUPTI, kernels=kernels, window=span)
    return _nvml(pids, metrics, users)


def _nvml(
    pids: set[Key],
    metrics: Mapping[str, Sequence[GpuMetricSample]],
    users: Collection[tuple[str, int, int]],
) -> PodIdle:
    """The fallback for a pod without traced kernels."""
    polls = _own_polls(pids, metrics)
    if polls:
        return PodIdle(
            nvml_idle.idle_ratio(polls),
            gpu_idle.NVML,
            detail=f"NVML per-process SM utilisation, {len(polls)} polls",
        )
    own = [
        m.value
        for node, ms in metrics.items()
        for m in ms
        if m.metric == PROC_SM_METRIC and (node, m.pid) in pids
    ]
    if own:  # readings without NVML's running list (older recordings)
        mean = sum(own) / len(own)
        return PodIdle(
            _clamp(1 - mean / 100),
            gpu_idle.NVML,
            detail=f"NVML per-process SM utilisation, {len(own)} readings",
        )
    devices = sorted({(node, dev) for node, dev, pid in users if (node, pid) in pids})
    if not devices:
        return PodIdle(
            None,
            "",
            "no kernel traced (no tracer was on in this pod) and NVML "
            "saw none of its processes on a GPU",
        )
    others = {(node, dev) for node, dev, pid in users if (node, pid) not in pids}
    shared = [d for d in devices if d in others]
    if shared:
        node, dev = shared[0]
        return PodIdle(
            None,
            "",
            f"no kernel traced (no tracer was on in this pod) and GPU "
            f"{dev} on {node} is shared with other processes, for which "
            "NVML gave no per-process utilisation",
        )
    figs = []
    for node, dev in devices:
        util = gpu_idle.nvml_util(metrics.get(node, ())).get(dev)
        if util:
            figs.append(sum(m.value for m in util) / len(util))
    if not figs:
        return PodIdle(
            None,
            "",
            "no kernel traced (no tracer was on in this pod) and no NVML "
            "utilisation reading of its GPU",
        )
    return PodIdle(
        _clamp(1 - sum(figs) / len(figs) / 100),
        gpu_idle.NVML,
        detail="NVML device utilisation of a GPU only this pod used",
    )


def _own_polls(pids: set[Key], metrics: Mapping[str, Sequence[GpuMetricSample]]) -> list[float]:
    """The pod's busy percent per NVML poll (``nvml_idle.poll_busy``, the light agent's
    definition): polls are the process rows one sampler pass wrote (same node, GPU, time);
    the running list is its ``proc_mem_used_bytes`` rows."""
    polls: dict[tuple[str, int, int], tuple[set[int], list[tuple[int, float]]]] = {}
    for node, ms in metrics.items():
        for m in ms:
            if m.metric not in (PROC_MEM_METRIC, PROC_SM_METRIC):
                continue
            running, samples = polls.setdefault((node, m.device, m.ts_ns), (set(), []))
            if m.metric == PROC_MEM_METRIC:
                running.add(m.pid)
            else:
                samples.append((m.pid, m.value))
    out = []
    for (node, _, _), (running, samples) in sorted(polls.items()):
        mine = {pid for n, pid in pids if n == node}
        if running and (b := nvml_idle.poll_busy(running, samples, mine)) is not None:
            out.append(b)
    return out


def _clamp(x: float) -> float:
    return min(1.0, max(0.0, x))
