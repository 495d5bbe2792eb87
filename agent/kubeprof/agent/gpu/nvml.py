"""NVML sampler: device and per-process GPU metrics, polled on a thread of the recorder.

Poll rates follow what was measured on the H200 (gpu-notes.md): utilization, power, clocks
and memory cost microseconds a call, so they are read every ``interval_s``; the process list
and per-process utilization every ``process_interval_s``; GPM (SM, tensor and DRAM activity,
device-wide) needs two samples a window apart and is read every ``gpm_interval_s``; total
energy is slow (~4 ms a call) and is read every ``energy_interval_s``.

NVML's own utilization counters are averages over its sampling window (~1/6 s to 1 s), so a
faster ``interval_s`` adds points, not resolution: the GPU idle ratio comes from kernel
intervals (kubeprof.analysis), NVML gives the device-wide and other-process view.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from kubeprof.model import Batch, GpuMetricSample

# GPM metric ids (nvml.h nvmlGpmMetricId_t) and our names for them
_GPM = {
    2: "gpm_sm_active_pct",  # NVML_GPM_METRIC_SM_UTIL
    3: "gpm_sm_occupancy_pct",  # NVML_GPM_METRIC_SM_OCCUPANCY
    5: "gpm_tensor_active_pct",  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    10: "gpm_dram_bw_pct",  # NVML_GPM_METRIC_DRAM_BW_UTIL
}


class NvmlError(RuntimeError):
    """NVML is unusable here; the message is one line for the user."""


@dataclass(eq=False)
class NvmlSampler:
    """``start()``, then ``poll()`` for new samples, ``stop()`` for the rest."""

    interval_s: float = 0.1
    _: KW_ONLY
    process_interval_s: float = 0.5
    gpm_interval_s: float = 0.25
    energy_interval_s: float = 2.0
    gpm: bool = True
    devices: list[int] | None = None
    messages: list[str] = field(default_factory=list, init=False)
    errors: int = field(default=0, init=False)
    _nvml: Any = field(default=None, init=False)
    _handles: list[tuple[int, Any]] = field(default_factory=list, init=False)
    _gpm_prev: dict[int, Any] = field(default_factory=dict, init=False)
    _proc_seen: dict[int, int] = field(default_factory=dict, init=False)
    _out: list[GpuMetricSample] = field(default_factory=list, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def start(self) -> None:
        """Initialise NVML; raises NvmlError (one line) when there is no NVML or no GPU."""
        try:
            import pynvml
        except ImportError:
            raise NvmlError("no NVML: nvidia-ml-py (pynvml) is not installed") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlError(f"no NVML: {exc} (no NVIDIA driver?)") from None
        self._nvml = pynvml
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            raise NvmlError("no GPU: NVML sees 0 devices")
        indices = self.devices if self.devices is not None else list(range(count))
        self._handles = [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in indices]
        if self.gpm:
            self._start_gpm()
        self._thread = threading.Thread(target=self._run, name="kubeprof-nvml", daemon=True)
        self._thread.start()

    def _start_gpm(self) -> None:
        nv = self._nvml
        for index, handle in self._handles:
            try:
                if not nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
                    continue
                sample = nv.nvmlGpmSampleAlloc()
                nv.nvmlGpmSampleGet(handle, sample)
                self._gpm_prev[index] = sample
            except (nv.NVMLError, AttributeError) as exc:
                self.messages.append(f"GPU {index}: GPM unavailable ({exc})")

    def poll(self) -> Batch:
        with self._lock:
            out, self._out = self._out, []
        counters = {"nvml_errors": self.errors} if self.errors else {}
        self.errors = 0
        return Batch(gpu_metrics=tuple(out), counters=counters)

    def stop(self) -> Batch:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        nv = self._nvml
        if nv is not None:
            for sample in self._gpm_prev.values():
                with contextlib.suppress(Exception):
                    nv.nvmlGpmSampleFree(sample)
            self._gpm_prev.clear()
            with contextlib.suppress(Exception):
                nv.nvmlShutdown()
        return self.poll()

    # ---- sampling thread ----
    def _run(self) -> None:
        next_proc = next_gpm = next_energy = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            rows: list[GpuMetricSample] = []
            ts = time.monotonic_ns()
            for index, handle in self._handles:
                rows += self._device(index, handle, ts)
                if now >= next_proc:
                    rows += self._processes(index, handle, ts)
                if now >= next_gpm and index in self._gpm_prev:
                    rows += self._gpm_read(index, handle, ts)
                if now >= next_energy:
                    rows += self._energy(index, handle, ts)
            if now >= next_proc:
                next_proc = now + self.process_interval_s
            if now >= next_gpm:
                next_gpm = now + self.gpm_interval_s
            if now >= next_energy:
                next_energy = now + self.energy_interval_s
            with self._lock:
                self._out += rows
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - now)))

    def _read(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self._nvml.NVMLError:
            self.errors += 1
            return None

    def _device(self, index: int, handle: Any, ts: int) -> list[GpuMetricSample]:
        nv = self._nvml
        rows = []
        util = self._read(nv.nvmlDeviceGetUtilizationRates, handle)
        if util is not None:
            rows.append(GpuMetricSample(ts, index, "gpu_util_pct", float(util.gpu)))
            rows.append(GpuMetricSample(ts, index, "mem_util_pct", float(util.memory)))
        mem = self._read(nv.nvmlDeviceGetMemoryInfo, handle)
        if mem is not None:
            rows.append(GpuMetricSample(ts, index, "mem_used_bytes", float(mem.used)))
            rows.append(GpuMetricSample(ts, index, "mem_total_bytes", float(mem.total)))
        power = self._read(nv.nvmlDeviceGetPowerUsage, handle)
        if power is not None:
            rows.append(GpuMetricSample(ts, index, "power_mw", float(power)))
        clock = self._read(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM)
        if clock is not None:
            rows.append(GpuMetricSample(ts, index, "sm_clock_mhz", float(clock)))
        return rows

    def _energy(self, index: int, handle: Any, ts: int) -> list[GpuMetricSample]:
        energy = self._read(self._nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        return [] if energy is None else [GpuMetricSample(ts, index, "energy_mj", float(energy))]

    def _processes(self, index: int, handle: Any, ts: int) -> list[GpuMetricSample]:
        nv = self._nvml
        rows = []
        procs = self._read(nv.nvmlDeviceGetComputeRunningProcesses, handle) or []
        for p in procs:
            used = p.usedGpuMemory if isinstance(p.usedGpuMemory, int) else 0
            rows.append(GpuMetricSample(ts, index, "proc_mem_used_bytes", float(used), pid=p.pid))
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(handle, self._proc_seen.get(index, 0))
        except nv.NVMLError:  # NotFound: no process used the GPU since last time
            samples = []
        for s in samples:
            self._proc_seen[index] = max(self._proc_seen.get(index, 0), int(s.timeStamp))
            rows.append(GpuMetricSample(ts, index, "proc_sm_util_pct", float(s.smUtil), pid=s.pid))
            rows.append(
                GpuMetricSample(ts, index, "proc_mem_util_pct", float(s.memUtil), pid=s.pid)
            )
        return rows

    def _gpm_read(self, index: int, handle: Any, ts: int) -> list[GpuMetricSample]:
        nv = self._nvml
        prev = self._gpm_prev[index]
        try:
            cur = nv.nvmlGpmSampleAlloc()
            nv.nvmlGpmSampleGet(handle, cur)
            req = nv.c_nvmlGpmMetricsGet_t()
            req.version = nv.NVML_GPM_METRICS_GET_VERSION
            req.numMetrics = len(_GPM)
            req.sample1 = prev
            req.sample2 = cur
            for i, metric_id in enumerate(_GPM):
                req.metrics[i].metricId = metric_id
            nv.nvmlGpmMetricsGet(req)
        except nv.NVMLError:
            self.errors += 1
            return []
        with contextlib.suppress(Exception):
            nv.nvmlGpmSampleFree(prev)
        self._gpm_prev[index] = cur
        rows = []
        for i, name in enumerate(_GPM.values()):
            m = req.metrics[i]
            if m.nvmlReturn == 0 and math.isfinite(m.value):
                rows.append(GpuMetricSample(ts, index, name, float(m.value)))
        return rows
