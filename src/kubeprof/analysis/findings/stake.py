"""Severity from what is at stake: the time a finding could save in the analysed window.

A ratio on a tiny window is no reason to alarm anyone: a finding is WARNING or CRITICAL only
when its estimated gain is worth it in seconds and as a share of the window, and a finding
without an estimated gain (or with a gain of zero) stays INFO.
"""

from __future__ import annotations

from dataclasses import replace

from kubeprof.analysis.findings.context import Context
from kubeprof.analysis.findings.model import Finding, Gain, Severity

WARNING_NS = 10_000_000  # a gain under 10 ms in the window is never a warning ...
WARNING_SHARE = 0.05  # ... nor one under 5 % of it
CRITICAL_NS = 100_000_000  # CRITICAL: at least 100 ms ...
CRITICAL_SHARE = 0.3  # ... and 30 % of the window
_LEVEL = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


def graded(ctx: Context, ns: float, cut: float, grades: tuple[Severity, Severity]) -> Severity:
    """The first grade when `ns` holds at least `cut` of the analysed window, else the second:
    a finding on lost time grades itself by its share of the window."""
    return grades[0] if ns >= cut * ctx.steady_ns else grades[1]


def window_gain(ctx: Context, saved_ns: int, how: str) -> Gain:
    """What a fix saves, in ns and as a share of the analysed window, and `how` in words."""
    return Gain(saved_ns, saved_ns / ctx.steady_ns, how)


def at_stake(gain: Gain | None) -> Severity:
    """The most severe level the gain supports."""
    if gain is None or gain.saved_ns < WARNING_NS or gain.share < WARNING_SHARE:
        return Severity.INFO
    if gain.saved_ns >= CRITICAL_NS and gain.share >= CRITICAL_SHARE:
        return Severity.CRITICAL
    return Severity.WARNING


def capped(f: Finding) -> Finding:
    """``f`` with its severity lowered to what its gain supports (never raised)."""
    cap = at_stake(f.gain)
    if _LEVEL[f.severity] <= _LEVEL[cap]:
        return f
    return replace(f, severity=cap)
