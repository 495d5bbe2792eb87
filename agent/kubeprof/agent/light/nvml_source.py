"""Real NVML readings (nvidia-ml-py), the edge the light agent polls on a GPU node."""

from __future__ import annotations

from typing import Any

from kubeprof.agent.light.readings import DeviceReading, ProcessSample, RunningProcess


class NvmlSource:
    """Reads every GPU once per ``read()``; NVML is initialised once."""

    def __init__(self) -> None:
        try:
            import pynvml  # nvidia-ml-py
        except ImportError as exc:
            raise RuntimeError(
                "NVML bindings missing: pip install nvidia-ml-py, or use "
                "--replay FILE for recorded readings"
            ) from exc
        self._nv: Any = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise RuntimeError(
                f"NVML unavailable here ({exc}); is this a GPU node with the driver mounted?"
            ) from exc
        n = pynvml.nvmlDeviceGetCount()
        self._handles = [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(n)]
        self._last_seen: dict[int, int] = {}

    def read(self) -> list[DeviceReading]:
        nv = self._nv
        out = []
        for i, h in self._handles:
            util = nv.nvmlDeviceGetUtilizationRates(h)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            try:
                mig = nv.nvmlDeviceGetMigMode(h)[0] == nv.NVML_DEVICE_MIG_ENABLE
            except nv.NVMLError:
                mig = False  # not a MIG-capable GPU
            procs = tuple(
                RunningProcess(p.pid, p.usedGpuMemory or 0)
                for p in nv.nvmlDeviceGetComputeRunningProcesses(h)
            )
            try:
                mps = tuple(
                    RunningProcess(p.pid, p.usedGpuMemory or 0)
                    for p in nv.nvmlDeviceGetMPSComputeRunningProcesses(h)
                )
            except (nv.NVMLError, AttributeError):
                mps = ()
            samples: tuple[ProcessSample, ...] = ()
            err = ""
            try:
                raw = nv.nvmlDeviceGetProcessUtilization(h, self._last_seen.get(i, 0))
                samples = tuple(ProcessSample(s.pid, s.timeStamp, s.smUtil, s.memUtil) for s in raw)
                if samples:
                    self._last_seen[i] = max(s.timeStamp for s in samples)
            except nv.NVMLError_NotFound:
                pass  # no process used the GPU since the last poll: all idle
            except nv.NVMLError as exc:
                err = str(exc)
            out.append(
                DeviceReading(
                    i,
                    nv.nvmlDeviceGetUUID(h),
                    int(util.gpu),
                    int(mem.used),
                    int(mem.total),
                    procs,
                    samples,
                    mig,
                    mps,
                    err,
                )
            )
        return out

    def close(self) -> None:
        self._nv.nvmlShutdown()
