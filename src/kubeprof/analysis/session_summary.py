"""A cluster session's results per scope (session, node, pod): samples, top stack, GPU idle.

Pure functions over what the queries return; the operator's aggregation only fetches and
stores. GPU idle comes from `gpu_idle` (the same definition `kubeprof report` shows): per
node, because GPU clocks of different nodes are not comparable, then combined.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kubeprof.analysis import gpu_idle
from kubeprof.analysis.findings import Finding
from kubeprof.analysis.pod_idle import PodIdle
from kubeprof.model import FrameKind, GpuActivity, GpuMetricSample, Stack

LABEL_MAX = 120  # characters of one stack label in .status


@dataclass
class Scope:
    """Results of one node or pod."""

    samples: int = 0
    gpu_idle: float | None = None
    top_stack: str = ""
    gpu_idle_source: str = ""  # pods: "cupti" (its own kernels) or "nvml"; "" without figure
    gpu_idle_missing: str = ""  # pods: why there is no figure (never a made-up 0 % / 100 %)


@dataclass
class GpuIdle:
    """Idle ratio of one GPU, where it comes from, and the pods that used it."""

    node: str
    device: int
    idle: float
    pods: list[str] = field(default_factory=list)
    source: str = gpu_idle.CUPTI  # "cupti" or "nvml" (fallback: no kernel traced on it)


@dataclass
class Summary:
    """Everything aggregated for one session."""

    samples: int = 0
    processes: int = 0
    gpu_idle: float | None = None
    gpu_idle_source: str = ""  # "cupti", "nvml" or "cupti+nvml"; "" without GPU data
    top_stacks: list[tuple[str, int]] = field(default_factory=list)  # (label, samples)
    nodes: dict[str, Scope] = field(default_factory=dict)
    pods: dict[str, Scope] = field(default_factory=dict)  # by pod uid
    gpus: list[GpuIdle] = field(default_factory=list)
    # Verdicts of `kubeprof.analysis.findings`, most severe first, with the node each is on.
    findings: list[tuple[str, Finding]] = field(default_factory=list)

    def top_finding(self) -> str:
        """One line for the printer column: the most severe finding, else the raw figures."""
        if self.findings:
            return self.findings[0][1].message[:LABEL_MAX]
        cpu = ""
        if self.top_stacks and self.samples:
            label, n = self.top_stacks[0]
            cpu = f"{n / self.samples:.0%} of CPU samples in {label}"
        if self.gpu_idle is not None and self.gpu_idle >= 0.5:
            gpu = f"GPU idle {self.gpu_idle:.0%}"
            if self.gpu_idle_source == gpu_idle.NVML:
                gpu += " (NVML)"
            return (f"{gpu}; {cpu}" if cpu else gpu)[:LABEL_MAX]
        return cpu[:LABEL_MAX] or "no samples collected"


def stack_label(stack: Stack) -> str:
    """Short text for a stack: the innermost Python frames if any, else the leaf frames."""
    py = [f for f in stack if f.kind is FrameKind.PYTHON]
    frames = py[-2:] if py else list(stack[-2:])
    return " <- ".join(f.label() for f in reversed(frames))[:LABEL_MAX] or "[empty]"


def samples_by_scope(
    counts: Iterable[tuple[str, int, int]], pid_pods: Mapping[tuple[str, int], str]
) -> Summary:
    """A Summary with sample counts per session, node and pod from (node, pid, n) rows."""
    s = Summary(processes=len(pid_pods))
    for node, pid, n in counts:
        s.samples += n
        s.nodes.setdefault(node, Scope()).samples += n
        uid = pid_pods.get((node, pid), "")
        if uid:
            s.pods.setdefault(uid, Scope()).samples += n
    return s


def node_gpus(
    node: str, activities: Sequence[GpuActivity], metrics: Sequence[GpuMetricSample]
) -> list[GpuIdle]:
    """One GpuIdle per device of a node, by the headline definition (gpu_idle.per_device)."""
    return [
        GpuIdle(node, dev, f.ratio, source=f.source)
        for dev, f in gpu_idle.per_device(activities, metrics).items()
        if f.ratio is not None
    ]


def add_gpu_idle(
    s: Summary,
    headlines: Mapping[str, gpu_idle.IdleFigure | None],
    gpus: Sequence[GpuIdle],
    users: Collection[tuple[str, int, int]],
    pid_pods: Mapping[tuple[str, int], str],
) -> None:
    """Fill GPU idle into `s`: session and nodes from each node's headline; each GPU with
    the pods that used it (`users`: (node, device, pid)). Pods get their own figures from
    `add_pod_idle`."""
    by_gpu: dict[tuple[str, int], set[str]] = {}
    for node, dev, pid in users:
        if (node, pid) in pid_pods:
            by_gpu.setdefault((node, dev), set()).add(pid_pods[(node, pid)])
    s.gpus = sorted(gpus, key=lambda g: (g.node, g.device))
    for g in s.gpus:
        g.pods = sorted(by_gpu.get((g.node, g.device), ()))
    known = {n: h for n, h in headlines.items() if h is not None}
    overall = gpu_idle.combine(known[n] for n in sorted(known))
    if overall is None:
        return
    s.gpu_idle, s.gpu_idle_source = overall.ratio, overall.source
    for node, h in known.items():
        s.nodes.setdefault(node, Scope()).gpu_idle = h.ratio


def add_pod_idle(s: Summary, figures: Mapping[str, PodIdle]) -> None:
    """Each pod's own GPU idle (`kubeprof.analysis.pod_idle`), with its source or what is
    missing; pods that used no GPU in a session without GPU data are left as they are."""
    for uid, f in sorted(figures.items()):
        if f.ratio is None and uid not in s.pods and not s.gpus:
            continue
        scope = s.pods.setdefault(uid, Scope())
        scope.gpu_idle, scope.gpu_idle_source, scope.gpu_idle_missing = (
            f.ratio,
            f.source,
            f.missing,
        )
