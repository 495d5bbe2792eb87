"""Brendan Gregg's folded format (``root;caller;leaf count``), written and read back.

Escaping: a frame label may itself hold ';' or a line break, which would split the frame
or the line. We percent-encode exactly four characters inside a label: '%' -> %25,
';' -> %3B, '\\n' -> %0A, '\\r' -> %0D. Unlike backslash escapes this keeps every line
valid for naive tools (flamegraph.pl, speedscope, inferno split on ';' and show '%3B'
literally), and `parse_collapsed` undoes it exactly. The count is the last space-separated
field, so labels may contain spaces.

Counts: the CPU view counts samples (the usual meaning); the GPU, off-CPU and wall views
count nanoseconds, because launches of different kernels, or waits of any length, are not
comparable. Stacks whose labels are
equal (same frames seen on several threads) are merged into one line.
"""

from __future__ import annotations

from collections.abc import Iterable

from kubeprof.report.tree import GROUPS, group_frames
from kubeprof.report.views import view_info, view_stacks
from kubeprof.reportdata import Profile, WeightedStack

_ESCAPES = (("%", "%25"), (";", "%3B"), ("\n", "%0A"), ("\r", "%0D"))


def escape_label(label: str) -> str:
    """Percent-encode the characters that would break the folded format ('%' first)."""
    for raw, enc in _ESCAPES:
        label = label.replace(raw, enc)
    return label


def unescape_label(text: str) -> str:
    """Undo escape_label ('%25' last, so '%253B' reads back as '%3B')."""
    for raw, enc in reversed(_ESCAPES):
        text = text.replace(enc, raw)
    return text


def folded_counts(
    stacks: Iterable[WeightedStack], *, weight: str, group: str = "none"
) -> dict[tuple[str, ...], int]:
    """Label tuples (root first) with their summed weight ("samples" or "ns")."""
    if group not in GROUPS:
        raise ValueError(f"unknown group {group!r}: expected one of {', '.join(GROUPS)}")
    counts: dict[tuple[str, ...], int] = {}
    for ws in stacks:
        key = tuple(f.label() for f in group_frames(ws, group) + ws.stack)
        if not key:
            continue
        counts[key] = counts.get(key, 0) + (ws.samples if weight == "samples" else ws.value_ns)
    return counts


def render_collapsed(profile: Profile, *, view: str = "cpu", group: str = "none") -> str:
    """Folded lines sorted by stack; `group` "process"/"thread" prefixes "name [pid]" frames."""
    weight = "ns" if view_info(view).weighs_time else "samples"
    counts = folded_counts(view_stacks(profile, view), weight=weight, group=group)
    lines = [
        ";".join(escape_label(label) for label in key) + f" {count}"
        for key, count in sorted(counts.items())
        if count > 0
    ]
    return "".join(line + "\n" for line in lines)


def parse_collapsed(text: str) -> dict[tuple[str, ...], int]:
    """Read folded lines back into {label tuple: count}; repeated stacks add up.

    Blank lines and lines starting with '#' are skipped; a line without a trailing integer
    count raises ValueError naming the line number.
    """
    counts: dict[tuple[str, ...], int] = {}
    # split on "\n" only: labels may hold other characters str.splitlines() would split on
    for lineno, raw in enumerate(text.split("\n"), 1):
        line = raw.removesuffix("\r")
        if not line.strip() or line.startswith("#"):
            continue
        stack, _, count = line.rstrip(" ").rpartition(" ")
        if not stack or not count.isdigit():
            raise ValueError(f"line {lineno}: expected 'frame;frame;... COUNT', got {line!r}")
        key = tuple(unescape_label(part) for part in stack.split(";"))
        counts[key] = counts.get(key, 0) + int(count)
    return counts
