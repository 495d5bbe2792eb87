"""One poll of NVML per GPU, in the shape of the NVML calls that produced it.

Field names follow nvml.h so a recording reads like the API: ``nvmlDeviceGetProcessUtilization``
gives ``samples`` (pid, timeStamp in µs, smUtil, memUtil), ``nvmlDeviceGetComputeRunningProcesses``
gives ``processes`` (pid, usedGpuMemory). The light agent reads them through ``Source`` so a
recorded-readings source (``RecordedSource``) stands in where there is no GPU (kwok, CI).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One nvmlProcessUtilizationSample_t."""

    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int = 0


@dataclass(frozen=True, slots=True)
class RunningProcess:
    """One nvmlProcessInfo_t from the compute (or MPS) running-process list."""

    pid: int
    usedGpuMemory: int


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """What one poll saw on one GPU."""

    gpu: int
    uuid: str
    util_gpu: int  # nvmlDeviceGetUtilizationRates().gpu, percent
    mem_used: int  # bytes, nvmlDeviceGetMemoryInfo
    mem_total: int
    processes: Sequence[RunningProcess] = ()
    samples: Sequence[ProcessSample] = ()
    mig: bool = False  # MIG mode enabled (no per-process utilization from NVML)
    mps_processes: Sequence[RunningProcess] = ()  # clients of an MPS server on this GPU
    util_error: str = ""  # why nvmlDeviceGetProcessUtilization gave nothing, if it failed


class Source(Protocol):
    """Where readings come from: real NVML, or a recording."""

    def read(self) -> list[DeviceReading]: ...

    def close(self) -> None: ...


class ReadingError(ValueError):
    """A recording line is malformed; the message names the line and the field."""


def reading_from_json(obj: dict[str, Any], where: str = "reading") -> DeviceReading:
    """A DeviceReading from its JSON form (what ``--replay`` files hold, one per line)."""
    try:
        return DeviceReading(
            gpu=int(obj["gpu"]),
            uuid=str(obj.get("uuid", f"GPU-{obj['gpu']}")),
            util_gpu=int(obj.get("util_gpu", 0)),
            mem_used=int(obj.get("mem_used", 0)),
            mem_total=int(obj.get("mem_total", 0)),
            processes=tuple(
                RunningProcess(int(p["pid"]), int(p.get("usedGpuMemory", 0)))
                for p in obj.get("processes", ())
            ),
            samples=tuple(
                ProcessSample(
                    int(s["pid"]), int(s["timeStamp"]), int(s["smUtil"]), int(s.get("memUtil", 0))
                )
                for s in obj.get("samples", ())
            ),
            mig=bool(obj.get("mig", False)),
            mps_processes=tuple(
                RunningProcess(int(p["pid"]), int(p.get("usedGpuMemory", 0)))
                for p in obj.get("mps_processes", ())
            ),
            util_error=str(obj.get("util_error", "")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ReadingError(
            f"{where}: bad or missing field {exc} (expected the NVML field "
            "names: gpu, processes[].pid, samples[].pid/timeStamp/smUtil)"
        ) from exc


@dataclass
class RecordedSource:
    """Replays a recording: each line is one poll ``{"t": s, "devices": [reading...]}``.

    Every ``read()`` returns the next poll, cycling at the end, so a short recording drives
    an agent for as long as a test needs. Sample timestamps are shifted by one recording
    length each cycle so NVML's "newer than last seen" rule still holds.
    """

    path: Path
    _polls: list[list[DeviceReading]] = field(default_factory=list)
    _i: int = 0

    def __post_init__(self) -> None:
        for n, line in enumerate(self.path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ReadingError(f"{self.path}:{n}: not JSON: {exc}") from exc
            self._polls.append(
                [reading_from_json(d, f"{self.path}:{n}") for d in obj.get("devices", ())]
            )
        if not self._polls:
            raise ReadingError(f"{self.path}: no readings (one JSON poll per line)")

    def read(self) -> list[DeviceReading]:
        cycle, idx = divmod(self._i, len(self._polls))
        self._i += 1
        shift = cycle * 10**9
        return [
            DeviceReading(
                d.gpu,
                d.uuid,
                d.util_gpu,
                d.mem_used,
                d.mem_total,
                d.processes,
                tuple(
                    ProcessSample(s.pid, s.timeStamp + shift, s.smUtil, s.memUtil)
                    for s in d.samples
                ),
                d.mig,
                d.mps_processes,
                d.util_error,
            )
            for d in self._polls[idx]
        ]

    def close(self) -> None:
        return None
