"""The report's data: aggregated stacks, the profile they form, and the whole report.

Renderers are pure functions of these structures, so they are tested without a database and
the same code renders a local session and a cluster session. This module is core: the
analysis builds these values, `kubeprof.report` renders them, and neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kubeprof.model import WeightedStack  # defined with the records: analysis builds them

if TYPE_CHECKING:  # types only: the analysis builds these from WeightedStack values
    from kubeprof.analysis.energy import EnergyEstimate
    from kubeprof.analysis.findings import Analysis
    from kubeprof.analysis.gpu_summary import GpuSummary

# Report-time meta: which window the CPU view shows when it is cut to the GPU analysis's
# window (reporting.cpu_follows_window writes it; the header and `kubeprof diff` say it).
CPU_WINDOW = "cpu_window"


@dataclass(frozen=True, slots=True)
class Profile:
    """A session's aggregated stacks, ready to render as flame graphs and tables."""

    session: str  # session name
    hz: int  # CPU sampling frequency
    duration_s: float  # wall-clock length of the session
    cpu: tuple[WeightedStack, ...] = ()
    gpu: tuple[WeightedStack, ...] = ()  # stacks end in a FrameKind.GPU frame
    meta: dict[str, str] = field(default_factory=dict)  # command, host, counters, ...
    # Waits (off-CPU): value_ns is wall time off CPU; each stack ends in a frame naming
    # the wait's reason. The "wall" view is cpu + offcpu per thread.
    offcpu: tuple[WeightedStack, ...] = ()


@dataclass(frozen=True, slots=True)
class Report:
    """Everything one report shows: what `kubeprof.report.formats.render` takes.

    The profile carries the session's name, length and meta; `gpu` is None for a session
    without GPU records. `analysis` is the findings analysis (steady-state headline, phases,
    timeline, idle breakdown, CPU during idle, findings), None where the session has neither
    GPU nor CPU data; `findings` repeats its findings, most severe first.
    """

    profile: Profile
    gpu: GpuSummary | None = None
    findings: tuple[object, ...] = ()
    analysis: Analysis | None = None
    # Energy and CO2e (Cloud Carbon Footprint method); None without energy or power readings
    # and without carbon settings. `energy_note` says why it is missing or incomplete.
    energy: EnergyEstimate | None = None
    energy_note: str = ""

    @property
    def session(self) -> str:
        return self.profile.session

    @property
    def meta(self) -> dict[str, str]:
        return self.profile.meta
