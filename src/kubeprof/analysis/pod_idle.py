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

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

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
Poll = tuple[str, int, int]  # (node, device, ts_ns): the process rows one NVML pass wrote


@dataclass
class _Polls:
    running: set[int] = field(default_factory=set)
    samples: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class _Pod:
    """One pod's share of a session's records, gathered in one pass over each input."""

    pids: set[Key] = field(default_factory=set)
    acts: dict[str, list[GpuActivity]] = field(default_factory=dict)  # node -> in order
    polls: set[Poll] = field(default_factory=set)  # polls that list one of its pids running
    own_sm: list[float] = field(default_factory=list)  # its PROC_SM readings, in order
    devices: set[tuple[str, int]] = field(default_factory=set)


class _Index:
    """Every pod's records, found by one pass over each input: a session of thousands of
    pods costs what its records cost, never pods x records."""

    def __init__(
        self,
        pid_pods: Mapping[Key, str],
        activities: Mapping[str, Sequence[GpuActivity]],
        metrics: Mapping[str, Sequence[GpuMetricSample]],
        users: Collection[tuple[str, int, int]],
    ) -> None:
        self.metrics = metrics
        self.pods: dict[str, _Pod] = defaultdict(_Pod)
        for key, pod in pid_pods.items():
            self.pods[pod].pids.add(key)
        for node, acts in activities.items():
            for a in acts:
                if (owner := pid_pods.get((node, a.pid))) is not None:
                    self.pods[owner].acts.setdefault(node, []).append(a)
        self.polls: dict[Poll, _Polls] = defaultdict(_Polls)
        for node, ms in metrics.items():
            for m in ms:
                if m.metric not in (PROC_MEM_METRIC, PROC_SM_METRIC):
                    continue
                poll = self.polls[(node, m.device, m.ts_ns)]
                owner = pid_pods.get((node, m.pid))
                if m.metric == PROC_MEM_METRIC:
                    poll.running.add(m.pid)
                    if owner is not None:
                        self.pods[owner].polls.add((node, m.device, m.ts_ns))
                else:
                    poll.samples.append((m.pid, m.value))
                    if owner is not None:
                        self.pods[owner].own_sm.append(m.value)
        # Each GPU's users by pod (None: a process of no pod), to tell a GPU shared.
        self.gpu_owners: dict[tuple[str, int], set[str | None]] = defaultdict(set)
        for node, dev, pid in users:
            owner = pid_pods.get((node, pid))
            self.gpu_owners[(node, dev)].add(owner)
            if owner is not None:
                self.pods[owner].devices.add((node, dev))
        self._util: dict[str, dict[int, list[GpuMetricSample]]] = {}

    def util(self, node: str) -> dict[int, list[GpuMetricSample]]:
        """Device-wide NVML utilisation of a node's GPUs (computed once per node)."""
        if node not in self._util:
            self._util[node] = gpu_idle.nvml_util(self.metrics.get(node, ()))
        return self._util[node]


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
    own = {k: u for k, u in pid_pods.items() if u == uid}
    return _figure(uid, _Index(own, activities, metrics, users))


def pods_idle(
    pid_pods: Mapping[Key, str],
    activities: Mapping[str, Sequence[GpuActivity]],
    metrics: Mapping[str, Sequence[GpuMetricSample]],
    users: Collection[tuple[str, int, int]],
    pods: Iterable[str],
) -> dict[str, PodIdle]:
    """`pod_idle` of each of `pods`, with the inputs read once for all of them."""
    index = _Index(pid_pods, activities, metrics, users)
    return {uid: _figure(uid, index) for uid in pods}


def _figure(uid: str, index: _Index) -> PodIdle:
    pod = index.pods.get(uid)
    if pod is None or not pod.pids:
        return PodIdle(None, "", "no process of this pod was found on its node")
    by_node = pod.acts
    kernels = sum(1 for acts in by_node.values() for a in acts if a.kind == "kernel")
    if kernels:
        figs = [f for n in sorted(by_node) if (f := gpu_idle.headline(by_node[n])) is not None]
        fig = gpu_idle.combine(figs)
        if fig is not None and fig.source == gpu_idle.CUPTI:
            span = (fig.window.start_ns, fig.window.end_ns)
            return PodIdle(fig.ratio, gpu_idle.CUPTI, kernels=kernels, window=span)
    return _nvml(uid, pod, index)


def _nvml(uid: str, pod: _Pod, index: _Index) -> PodIdle:
    """The fallback for a pod without traced kernels."""
    polls = _own_polls(pod, index)
    if polls:
        return PodIdle(
            nvml_idle.idle_ratio(polls),
            gpu_idle.NVML,
            detail=f"NVML per-process SM utilisation, {len(polls)} polls",
        )
    own = pod.own_sm
    if own:  # readings without NVML's running list (older recordings)
        mean = sum(own) / len(own)
        return PodIdle(
            _clamp(1 - mean / 100),
            gpu_idle.NVML,
            detail=f"NVML per-process SM utilisation, {len(own)} readings",
        )
    devices = sorted(pod.devices)
    if not devices:
        return PodIdle(
            None,
            "",
            "no kernel traced (no tracer was on in this pod) and NVML "
            "saw none of its processes on a GPU",
        )
    shared = [d for d in devices if index.gpu_owners[d] - {uid}]
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
        util = index.util(node).get(dev)
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


def _own_polls(pod: _Pod, index: _Index) -> list[float]:
    """The pod's busy percent per NVML poll (``nvml_idle.poll_busy``, the light agent's
    definition): polls are the process rows one sampler pass wrote (same node, GPU, time);
    the running list is its ``proc_mem_used_bytes`` rows. Only polls listing one of the
    pod's processes as running count (others give no figure)."""
    out = []
    for key in sorted(pod.polls):
        node = key[0]
        poll = index.polls[key]
        mine = {pid for n, pid in pod.pids if n == node}
        if (b := nvml_idle.poll_busy(poll.running, poll.samples, mine)) is not None:
            out.append(b)
    return out


def _clamp(x: float) -> float:
    return min(1.0, max(0.0, x))
