from __future__ import annotations

import dataclasses

import pytest

from kubeprof.report.collapsed import parse_collapsed
from kubeprof.report.formats import FORMATS, render
from kubeprof.reportdata import Profile, Report
from tests.support.pprof_read import parse_pprof


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_renders_with_declared_type(profile, fmt):
    out = render(Report(profile), fmt)
    assert isinstance(out, bytes) is FORMATS[fmt].binary
    assert out


def test_single_view_formats_fall_back_to_gpu(profile):
    gpu_only = dataclasses.replace(profile, cpu=())
    assert parse_pprof(render(Report(gpu_only), "pprof")).sample_types[0] == ("launches", "count")
    assert sum(parse_collapsed(render(Report(gpu_only), "collapsed")).values()) == 4_000_000
    assert parse_pprof(render(Report(profile), "pprof", view="gpu")).total("gpu") == 4_000_000


def test_unknown_format_and_view(profile):
    with pytest.raises(ValueError, match="unknown format"):
        render(Report(profile), "svg")
    with pytest.raises(ValueError, match="unknown view"):
        render(Report(profile), "pprof", view="tpu")


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_empty_profile_renders(fmt):
    out = render(Report(Profile("empty", 99, 0.0)), fmt)
    assert isinstance(out, bytes) is FORMATS[fmt].binary


def _gpu_report(profile):
    from kubeprof.analysis.gpu_summary import gpu_summary
    from kubeprof.model import GpuActivity

    acts = [
        GpuActivity("kernel", "k", 0, 100, 0, 10, 1),
        GpuActivity("kernel", "k", 300, 400, 0, 10, 2),
    ]
    return Report(profile, gpu=gpu_summary(acts, [], 0, 1000))


def test_text_and_html_carry_the_gpu_section_through_render(profile):
    report = _gpu_report(profile)
    text = render(report, "text")
    assert text.startswith(render(Report(profile), "text"))
    assert "\nGPU\n===\n" in text and "steady state 50.0 %" in text
    html = render(report, "html")
    assert '<section class="kubeprof-gpu">' in html and html.rstrip().endswith("</html>")


@pytest.mark.parametrize("fmt", ["collapsed", "speedscope", "pprof"])
def test_single_view_formats_have_no_gpu_text_appended(profile, fmt):
    assert render(_gpu_report(profile), fmt) == render(Report(profile), fmt)
