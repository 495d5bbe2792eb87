"""The light agent's Prometheus figures, built from a Window on each scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kubeprof.agent.light.window import Window

POD_LABELS = ["namespace", "pod", "container", "node", "gpu"]
REASONS = {
    "mig": "MIG mode: NVML reports no per-process utilization per MIG instance",
    "mps": "MPS: client work runs in the MPS server's context, not attributable per process",
    "nvml_error": "nvmlDeviceGetProcessUtilization failed on this GPU",
}


class WindowCollector(Collector):
    """Collects `window`'s figures for `node` (called by prometheus_client per scrape)."""

    def __init__(self, window: Window, node: str) -> None:
        self.window = window
        self.node = node

    def collect(self) -> Iterator[GaugeMetricFamily]:
        w = self.window.seconds
        idle = GaugeMetricFamily(
            "kubeprof_gpu_idle_ratio",
            f"Share of the last {w:g}s a container's GPU ran none of its kernels "
            "(1 - mean NVML smUtil/100); absent where NVML cannot attribute",
            labels=POD_LABELS,
        )
        busy = GaugeMetricFamily(
            "kubeprof_gpu_busy_ratio",
            f"Mean NVML per-process SM utilization of a container over the last {w:g}s, 0-1",
            labels=POD_LABELS,
        )
        mem = GaugeMetricFamily(
            "kubeprof_gpu_memory_used_bytes",
            "GPU memory held by a container's processes (latest poll)",
            labels=POD_LABELS,
        )
        for f in self.window.pods():
            lv = [f.owner.namespace, f.owner.pod, f.owner.container, self.node, str(f.gpu)]
            mem.add_metric(lv, f.memory_bytes)
            if f.idle_ratio is not None:
                idle.add_metric(lv, f.idle_ratio)
                busy.add_metric(lv, f.busy_pct / 100.0)
        dev_util = GaugeMetricFamily(
            "kubeprof_gpu_device_utilization_ratio",
            f"NVML device utilization, mean over the last {w:g}s, 0-1",
            labels=["node", "gpu"],
        )
        dev_mem = GaugeMetricFamily(
            "kubeprof_gpu_device_memory_used_bytes",
            "GPU memory in use on the device",
            labels=["node", "gpu"],
        )
        dev_total = GaugeMetricFamily(
            "kubeprof_gpu_device_memory_total_bytes",
            "GPU memory of the device",
            labels=["node", "gpu"],
        )
        unattr = GaugeMetricFamily(
            "kubeprof_gpu_unattributable_info",
            "1 for a GPU whose work NVML cannot attribute to processes, with the reason; "
            "no per-pod idle/busy figure is exported for it",
            labels=["node", "gpu", "reason", "detail"],
        )
        for g in self.window.gpus():
            lv = [self.node, str(g.gpu)]
            dev_util.add_metric(lv, g.util_pct / 100.0)
            dev_mem.add_metric(lv, g.mem_used)
            dev_total.add_metric(lv, g.mem_total)
            if g.reason:
                unattr.add_metric([*lv, g.reason, REASONS.get(g.reason, g.reason)], 1)
        yield from (idle, busy, mem, dev_util, dev_mem, dev_total, unattr)
