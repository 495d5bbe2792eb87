"""Words and flame-graph targets for the findings analysis, shared by text, HTML and JSON.

Findings carry evidence as strings in the analysis' own formats (``"load_batch (data.py:42)
88 %"`` for CPU frames, ``"/path/data.py:42 load_batch"`` for source lines, ``"name: ..."``
for kernels); this module turns them into the labels the flame graph shows, so a report can
link each finding to its frames.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from kubeprof.analysis.findings import Finding, Kind
from kubeprof.analysis.steady_idle import IdleFigure
from kubeprof.report.units import in_unit, percent

TITLES: dict[str, str] = {
    Kind.GPU_STARVED: "GPU starved by the CPU",
    Kind.LAUNCH_BOUND: "Launch-bound",
    Kind.FUSION: "Fusion candidate",
    Kind.SYNC_STALL: "Host-device sync stalls",
    Kind.PAGEABLE_MEMCPY: "Pageable memory copies",
    Kind.KERNEL_BOUND: "Memory- vs compute-bound kernels",
    Kind.WAITING_FOR_WORK: "GPU waiting for work",
    Kind.INPUT_STARVED: "Input pipeline starved",
    Kind.COPY_BOUND: "Copy-bound",
}
_SHARE = re.compile(r"\s+\d+(?:\.\d+)?\s*%$")
_RATIO_KEYS = ("share", "idle", "ratio")


@dataclass(frozen=True, slots=True)
class Target:
    """A flame-graph frame a finding points at: the view and the text to search for."""

    view: str  # "cpu" or "gpu"
    search: str  # a frame label (or part of one), as the flame graph names frames


def title(kind: str) -> str:
    return TITLES.get(kind, kind.replace("_", " ").capitalize())


def frame_label(evidence_frame: str) -> str:
    """``"load_batch (data.py:42) 88 %"`` -> ``"load_batch (data.py:42)"``."""
    return _SHARE.sub("", evidence_frame)


def line_label(evidence_line: str) -> str:
    """``"/src/data.py:42 load_batch"`` -> ``"load_batch (data.py:42)"`` (a Frame.label())."""
    where, _, name = evidence_line.partition(" ")
    path, _, line = where.rpartition(":")
    short = path.rsplit("/", 1)[-1]
    if not path or not line.isdigit():
        return evidence_line
    return f"{name} ({short}:{line})" if name else f"{short}:{line}"


def kernel_label(evidence_kernel: str) -> str:
    """``"gemm: compute-bound (...)"`` -> ``"gemm"``: the kernel name the GPU view shows."""
    return evidence_kernel.split(": ", 1)[0].strip()


def targets(f: Finding) -> tuple[Target, ...]:
    """Flame-graph frames of a finding: its CPU frames, source lines, then kernels."""
    out = [Target("cpu", frame_label(x)) for x in f.evidence.frames]
    out += [Target("cpu", line_label(x)) for x in f.evidence.lines]
    out += [Target("gpu", kernel_label(x)) for x in f.evidence.kernels]
    return tuple(dict.fromkeys(out))


def number(key: str, value: float) -> str:
    """An evidence number in words: shares as percentages, counts with separators."""
    if key.endswith(_RATIO_KEYS) or key.startswith("steady_idle"):
        return percent(value)
    if float(value).is_integer() and abs(value) >= 1:
        return f"{int(value):,}"
    return f"{value:.3g}"


def number_name(key: str) -> str:
    for unit in ("_ms", "_us", "_pct"):
        if key.endswith(unit):
            return f"{key[: -len(unit)].replace('_', ' ')} ({unit[1:].replace('us', 'µs')})"
    return key.replace("_", " ")


# A share of the window, e.g. `12.5 %`; "not measured" when no data backs it.
pct = functools.partial(percent, missing="not measured")


def figure_text(fig: IdleFigure) -> str:
    """An idle figure, or "not measured (why)" when no data backs it."""
    if fig.ratio is None:
        return f"not measured ({fig.reason})" if fig.reason else "not measured"
    return pct(fig.ratio)


seconds = functools.partial(in_unit, unit="s", digits=2)  # a span in seconds: `1.50 s`
