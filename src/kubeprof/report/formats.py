"""One entry point for `kubeprof report --format`: format name -> renderer, file suffix.

`render` takes the whole Report. Single-view formats (collapsed, pprof, speedscope) render
the CPU view unless asked for another, falling back to GPU when a profile has only GPU
data; text and html show the findings first, then every view that has data, then the GPU
summary when there is one; json is the whole report, machine-readable (json_report.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from kubeprof.report.analysis_html import findings_html
from kubeprof.report.analysis_text import energy_text, findings_text, idle_text
from kubeprof.report.collapsed import render_collapsed
from kubeprof.report.flamegraph import render_html
from kubeprof.report.gpu import render_gpu_html, render_gpu_text
from kubeprof.report.header import gpu_tracing, items, process_names
from kubeprof.report.json_report import render_json
from kubeprof.report.pprof import render_pprof
from kubeprof.report.speedscope import render_speedscope
from kubeprof.report.text import render_text
from kubeprof.report.views import available_views
from kubeprof.reportdata import Report
from kubeprof.safe_text import escape_controls


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
        Format("json", ".json", False),
        Format("html", ".html", False),
        Format("collapsed", ".folded", False),
        Format("pprof", ".pb.gz", True),
        Format("speedscope", ".speedscope.json", False),
    )
}


def render(
    report: Report,
    fmt: str,
    *,
    view: str | None = None,
    top: int = 10,
    width: int = 100,
    startup: bool = False,
) -> str | bytes:
    """Render `report` in format `fmt`; `view` picks the flame graph view (cpu, gpu);
    `top`, `width` (0: no cut) and `startup` (rank start-up frames) shape the text."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    profile = report.profile
    a = report.analysis
    off = gpu_off_reason(report)
    names = process_names(profile)
    cpu_only = is_cpu_only(report)
    if fmt == "text":
        if cpu_only:  # no GPU sections: one line in their place
            pre = [f"GPU: not recorded ({gpu_tracing(report)[1]})", ""]
        else:
            pre = [*findings_text(a), *idle_text(a)] if a is not None else []
        pre += energy_text(report)
        text = render_text(profile, view=view, preamble=pre, top=top, width=width, startup=startup)
        if report.gpu is not None:
            shown = a is not None and a.headline.ratio is not None
            gpu = render_gpu_text(report.gpu, off_reason=off, names=names, headline_shown=shown)
            text = f"{text}\n{gpu}"
        # Names come from the profiled programs: no escape sequence reaches a terminal.
        return escape_controls(text, keep="\n\t")
    if fmt == "json":
        return render_json(report)
    if fmt == "html":
        sections = (
            [("GPU", render_gpu_html(report.gpu, off_reason=off, names=names))]
            if report.gpu is not None
            else []
        )
        first = [("Findings", findings_html(a))] if a is not None and not cpu_only else []
        return render_html(
            profile,
            view=view,
            extra_sections=sections,
            top_sections=first,
            header_items=items(report),
        )
    single = view or available_views(profile)[0]
    if fmt == "collapsed":
        return render_collapsed(profile, view=single)
    if fmt == "pprof":
        return render_pprof(profile, view=single)
    return render_speedscope(profile, view=single)


def is_cpu_only(report: Report) -> bool:
    """A session recorded without --gpu and holding no GPU data: its report has no GPU
    sections (findings and idle are GPU analyses), only the header's word on it."""
    a = report.analysis
    return (
        report.gpu is None
        and not report.profile.gpu
        and (a is None or a.headline.ratio is None)
        and gpu_tracing(report)[0] is None
    )


def gpu_off_reason(report: Report) -> str:
    """Why no GPU figure is shown ("" when kernels were traced or nothing says otherwise)."""
    traced, words = gpu_tracing(report)
    return words if traced is False else ""
