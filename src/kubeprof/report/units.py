"""Percentages and durations as the reports print them.

One implementation; the few house styles (a table's fixed width, no `%` sign inside
parentheses, "-" or "not measured" for a figure that is missing, thousands separators)
are its options, so every report rounds a number the same way.
"""

from __future__ import annotations

_NS_PER = {"s": 1e9, "ms": 1e6, "µs": 1e3, "us": 1e3, "ns": 1.0}


def percent(
    part: float | None,
    whole: float = 1.0,
    *,
    digits: int = 1,
    width: int = 0,
    sign: str = " %",
    missing: str = "-",
) -> str:
    """100 * part / whole, e.g. `12.5 %` (0 of 0 is 0); `missing` when there is no part."""
    if part is None:
        return missing
    value = 100.0 * part / whole if whole else 0.0
    return f"{value:{width or ''}.{digits}f}{sign}"


def in_unit(ns: float, unit: str, digits: int, *, grouped: bool = False) -> str:
    """A span of `ns` nanoseconds in `unit` (s, ms, µs, us, ns), e.g. `1,234.50 ms`."""
    return f"{ns / _NS_PER[unit]:{',' if grouped else ''}.{digits}f} {unit}"


def duration(ns: float) -> str:
    """Short human duration in the largest unit that fits: 1.23 s, 45.6 ms, 789 us, 12 ns."""
    if ns >= 1e9:
        return in_unit(ns, "s", 2)
    if ns >= 1e6:
        return in_unit(ns, "ms", 1)
    if ns >= 1e3:
        return in_unit(ns, "us", 0)
    return in_unit(ns, "ns", 0)
