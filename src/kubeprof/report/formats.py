"""One entry point for `kubeprof report --format`: format name -> renderer, file suffix.

Single-view formats (collapsed, pprof, speedscope) render the CPU view unless asked for
another, falling back to GPU when a profile has only GPU data; text and html show every
view that has data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kubeprof.report.aggregate import Profile
from kubeprof.report.collapsed import render_collapsed
from kubeprof.report.flamegraph import render_html
from kubeprof.report.pprof import render_pprof
from kubeprof.report.speedscope import render_speedscope
from kubeprof.report.text import render_text
from kubeprof.report.views import available_views


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


def render(
    profile: Profile,
    fmt: str,
    *,
    view: str | None = None,
    extra_sections: Sequence[tuple[str, str]] = (),
) -> str | bytes:
    """Render `profile` in format `fmt`; `extra_sections` only apply to html."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "text":
        return render_text(profile, view=view)
    if fmt == "html":
        return render_html(profile, view=view, extra_sections=extra_sections)
    single = view or available_views(profile)[0]
    if fmt == "collapsed":
        return render_collapsed(profile, view=single)
    if fmt == "pprof":
        return render_pprof(profile, view=single)
    return render_speedscope(profile, view=single)
