"""Which stacks a renderer draws: the CPU view or the GPU view of a profile.

Every renderer takes ``view="cpu"|"gpu"``; this module is the one place that maps the name to
the profile's stacks and to the words used for its counts, so the formats agree on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubeprof.reportdata import Profile, WeightedStack


@dataclass(frozen=True, slots=True)
class View:
    """Names for one view's two measures (a count and a time)."""

    name: str  # "cpu" | "gpu"
    count_unit: str  # what `WeightedStack.samples` counts: "samples" or "launches"
    time_type: str  # pprof sample type of `value_ns`: "cpu" or "gpu"
    title: str  # human title, e.g. "CPU time"


VIEWS: dict[str, View] = {
    "cpu": View("cpu", "samples", "cpu", "CPU time"),
    "gpu": View("gpu", "launches", "gpu", "GPU time"),
}


def view_info(view: str) -> View:
    """The View for a name; a clear error for anything else."""
    try:
        return VIEWS[view]
    except KeyError:
        raise ValueError(f"unknown view {view!r}: expected one of {', '.join(VIEWS)}") from None


def view_stacks(profile: Profile, view: str) -> tuple[WeightedStack, ...]:
    """The weighted stacks of a view ("cpu" -> profile.cpu, "gpu" -> profile.gpu)."""
    view_info(view)
    return profile.gpu if view == "gpu" else profile.cpu


def available_views(profile: Profile) -> list[str]:
    """Views that hold data, CPU first; ["cpu"] for an empty profile so there is one to show."""
    views = [name for name in VIEWS if view_stacks(profile, name)]
    return views or ["cpu"]


def format_ns(ns: float) -> str:
    """Short human duration: 1.23 s, 45.6 ms, 789 us, 12 ns."""
    if ns >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.0f} us"
    return f"{ns:.0f} ns"
