"""One entry point for `kubeprof report --format`: format name -> renderer, file suffix.

`render` takes the whole Report. Single-view formats (collapsed, pprof, speedscope) render
the CPU view unless asked for another, falling back to GPU when a profile has only GPU
data; text and html show every view that has data, then the GPU summary when there is one.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubeprof.report.collapsed import render_collapsed
from kubeprof.report.flamegraph import render_html
from kubeprof.report.gpu import render_gpu_html, render_gpu_text
from kubeprof.report.pprof import render_pprof
from kubeprof.report.speedscope import render_speedscope
from kubeprof.report.text import render_text
from kubeprof.report.views import available_views
from kubeprof.reportdata import Report


@dataclass(frozen=True, slots=True)
class Format:
    """An output format: its default file suffix and whether it is bytes."""

    name: str
    suffix: str  # e.g. ".pb.gz"
    binary: bool


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("text", ".txt", False),
        Format("html", ".html", False),
        Format("collapsed", ".folded", False),
        Format("pprof", ".pb.gz", True),
        Format("speedscope", ".speedscope.json", False),
    )
}


def render(report: Report, fmt: str, *, view: str | None = None) -> str | bytes:
    """Render `report` in format `fmt`; `view` picks the flame graph view (cpu, gpu)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    profile = report.profile
    if fmt == "text":
        text = render_text(profile, view=view)
        return f"{text}\n{render_gpu_text(report.gpu)}" if report.gpu is not None else text
    if fmt == "html":
        sections = [("GPU", render_gpu_html(report.gpu))] if report.gpu is not None else []
        return render_html(profile, view=view, extra_sections=sections)
    single = view or available_views(profile)[0]
    if fmt == "collapsed":
        return render_collapsed(profile, view=single)
    if fmt == "pprof":
        return render_pprof(profile, view=single)
    return render_speedscope(profile, view=single)
