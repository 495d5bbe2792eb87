"""The aggregated profile every renderer consumes.

Renderers are pure functions of this structure, so they are tested without a database and
the same code renders a local session and a cluster session.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubeprof.model import Stack


@dataclass(frozen=True, slots=True)
class WeightedStack:
    """One distinct stack of one thread, with how often / how long it was seen."""

    stack: Stack  # root first, leaf last
    pid: int
    tid: int
    thread: str  # thread name
    process: str  # process name (comm) or command line
    samples: int  # number of samples (CPU) or kernel launches (GPU)
    value_ns: int  # CPU: samples * sampling period; GPU: device time in ns


@dataclass(frozen=True, slots=True)
class Profile:
    """A session's aggregated data, ready to render."""

    session: str  # session name
    hz: int  # CPU sampling frequency
    duration_s: float  # wall-clock length of the session
    cpu: tuple[WeightedStack, ...] = ()
    gpu: tuple[WeightedStack, ...] = ()  # stacks end in a FrameKind.GPU frame
    meta: dict[str, str] = field(default_factory=dict)  # command, host, counters, ...
