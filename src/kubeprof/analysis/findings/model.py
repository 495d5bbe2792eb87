"""A finding: what is wrong, how sure we are, the evidence, and what fixing it would gain."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Kind(StrEnum):
    GPU_STARVED = "gpu_starved"  # the GPU waits on the CPU (input pipeline, Python)
    LAUNCH_BOUND = "launch_bound"  # kernels shorter than the gaps between their launches
    FUSION = "fusion"  # back-to-back short elementwise kernels from one Python frame
    SYNC_STALL = "sync_stall"  # host-device syncs (.item(), .cpu()) drain the GPU queue
    PAGEABLE_MEMCPY = "pageable_memcpy"  # copies from/to pageable host memory
    KERNEL_BOUND = "kernel_bound"  # memory- vs compute-bound kernels
    WAITING_FOR_WORK = "waiting_for_work"  # the launcher blocked outside any input pipeline
    INPUT_STARVED = "input_starved"  # the launcher waits on a DataLoader / producer queue
    COPY_BOUND = "copy_bound"  # copies take most of the device time


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class Gain:
    """Estimated saving if the finding is fixed, and the model the estimate rests on."""

    saved_ns: int  # per analysed window (the steady state, or the active window without a loop)
    share: float  # saved_ns / the analysed window's duration
    model: str  # in words: what the estimate assumes


@dataclass(frozen=True, slots=True)
class Evidence:
    """What backs a finding: numbers, CPU stacks/frames, kernels and source lines."""

    # int | float: a count stays an int when a stored view is read back (storage.prepared_views)
    numbers: dict[str, int | float] = field(default_factory=dict)
    frames: tuple[str, ...] = ()  # CPU frames with their share, e.g. "load_batch (data.py:42) 88 %"
    kernels: tuple[str, ...] = ()  # short kernel names
    lines: tuple[str, ...] = ()  # Python source lines, "file.py:42 function"


@dataclass(frozen=True, slots=True)
class Finding:
    """One verdict of the analysis."""

    kind: Kind
    severity: Severity
    message: str  # one line a person can act on
    evidence: Evidence
    gain: Gain | None = None  # None where no honest estimate exists
