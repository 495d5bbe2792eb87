"""Which stacks a renderer draws: the CPU, GPU, off-CPU or wall-clock view of a profile.

Every renderer takes ``view="cpu"|"gpu"|"off-cpu"|"wall"``; this module is the one place that
maps the name to the profile's stacks and to the words used for its counts, so the formats
agree on them. "off-cpu" is where threads waited (each stack ends in a frame naming why);
"wall" is on-CPU and off-CPU time together per thread, so a thread's total is where its
wall-clock time went, a thread that only waited included.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubeprof.report.units import duration
from kubeprof.reportdata import Profile, WeightedStack


@dataclass(frozen=True, slots=True)
class View:
    """Names for one view's two measures (a count and a time)."""

    name: str  # "cpu" | "gpu" | "off-cpu" | "wall"
    count_unit: str  # what `WeightedStack.samples` counts: "samples", "launches", "waits"
    time_type: str  # pprof sample type of `value_ns`: "cpu", "gpu", "off-cpu", "wall"
    title: str  # human title, e.g. "CPU time"

    @property
    def weighs_time(self) -> bool:
        """Counts are not comparable (a launch, a wait of any length): weigh by ns."""
        return self.name != "cpu"


VIEWS: dict[str, View] = {
    "cpu": View("cpu", "samples", "cpu", "CPU time"),
    "gpu": View("gpu", "launches", "gpu", "GPU time"),
    "off-cpu": View("off-cpu", "waits", "off-cpu", "Off-CPU time"),
    "wall": View("wall", "samples and waits", "wall", "Wall-clock time (on + off CPU)"),
}


def view_info(view: str) -> View:
    """The View for a name; a clear error for anything else."""
    try:
        return VIEWS[view]
    except KeyError:
        raise ValueError(f"unknown view {view!r}: expected one of {', '.join(VIEWS)}") from None


def view_stacks(profile: Profile, view: str) -> tuple[WeightedStack, ...]:
    """The weighted stacks of a view: profile.cpu, .gpu, .offcpu, or cpu + offcpu (wall)."""
    view_info(view)
    if view == "gpu":
        return profile.gpu
    if view == "off-cpu":
        return profile.offcpu
    if view == "wall":
        return profile.cpu + profile.offcpu
    return profile.cpu


def available_views(profile: Profile) -> list[str]:
    """Views that hold data, CPU first; ["cpu"] for an empty profile so there is one to show.
    "wall" only with off-CPU data (without it, it is the CPU view again)."""
    views = [name for name in VIEWS if view_stacks(profile, name)]
    if not profile.offcpu and "wall" in views:
        views.remove("wall")
    return views or ["cpu"]


format_ns = duration  # short human duration: 1.23 s, 45.6 ms, 789 us, 12 ns
