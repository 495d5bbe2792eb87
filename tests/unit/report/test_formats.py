from __future__ import annotations

import dataclasses

import pytest

from kubeprof.report.aggregate import Profile
from kubeprof.report.collapsed import parse_collapsed
from kubeprof.report.formats import FORMATS, render
from kubeprof.report.pprof_read import parse_pprof


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_renders_with_declared_type(profile, fmt):
    out = render(profile, fmt)
    assert isinstance(out, bytes) is FORMATS[fmt].binary
    assert out


def test_single_view_formats_fall_back_to_gpu(profile):
    gpu_only = dataclasses.replace(profile, cpu=())
    assert parse_pprof(render(gpu_only, "pprof")).sample_types[0] == ("launches", "count")
    assert sum(parse_collapsed(render(gpu_only, "collapsed")).values()) == 4_000_000
    assert parse_pprof(render(profile, "pprof", view="gpu")).total("gpu") == 4_000_000


def test_unknown_format_and_view(profile):
    with pytest.raises(ValueError, match="unknown format"):
        render(profile, "svg")
    with pytest.raises(ValueError, match="unknown view"):
        render(profile, "pprof", view="tpu")


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_empty_profile_renders(fmt):
    out = render(Profile("empty", 99, 0.0), fmt)
    assert isinstance(out, bytes) is FORMATS[fmt].binary
