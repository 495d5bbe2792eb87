from __future__ import annotations

import dataclasses

import pytest

from kubeprof.model import Frame, FrameKind
from kubeprof.report.collapsed import (
    escape_label,
    parse_collapsed,
    render_collapsed,
    unescape_label,
)

from .sample_profile import ws


def test_exact_folded_lines(profile):
    assert render_collapsed(profile).splitlines() == [
        "_start;sha256_block;page_fault_[k] 40",
        "main (app.py:3);cold (app.py:20) 20",
        "main (app.py:3);hot (app.py:12) 80",
        "worker_loop (app.py:30);hot (app.py:12);memcpy 60",
    ]


def test_round_trip_cpu_and_gpu(profile):
    back = parse_collapsed(render_collapsed(profile))
    expected = {tuple(f.label() for f in w.stack): w.samples for w in profile.cpu}
    assert back == expected
    gpu = parse_collapsed(render_collapsed(profile, view="gpu"))
    assert sum(gpu.values()) == 4_000_000  # GPU view counts nanoseconds
    assert (
        gpu[("main (app.py:3)", "step (app.py:40)", "cudaLaunchKernel", "sgemm_[gpu]")] == 3_000_000
    )


def test_round_trip_hostile_labels(profile):
    odd = [
        Frame("a;b", FrameKind.NATIVE),
        Frame("multi\nline\r\nname", FrameKind.NATIVE),
        Frame("100% sure %3B literal %25", FrameKind.NATIVE),
        Frame("with spaces 12", FrameKind.NATIVE),
        Frame("sep\x1e\x0cchars\u2028", FrameKind.NATIVE),
        Frame("", FrameKind.NATIVE),
    ]
    prof = dataclasses.replace(profile, cpu=(ws(tuple(odd), 7), ws(tuple(odd[:2]), 3, tid=11)))
    text = render_collapsed(prof)
    assert text.count("\n") == 2  # one line per stack, whatever the labels hold
    assert parse_collapsed(text) == {
        tuple(f.label() for f in odd): 7,
        tuple(f.label() for f in odd[:2]): 3,
    }


@pytest.mark.parametrize("label", ["", "%", "%%3B", ";;", "a%3Bb", "\n%0A", "x%253By"])
def test_escape_is_reversible(label):
    encoded = escape_label(label)
    assert ";" not in encoded and "\n" not in encoded
    assert unescape_label(encoded) == label


def test_same_labels_on_several_threads_merge(profile):
    prof = dataclasses.replace(
        profile, cpu=(ws(profile.cpu[0].stack, 5), ws(profile.cpu[0].stack, 6, tid=11))
    )
    assert render_collapsed(prof) == "main (app.py:3);hot (app.py:12) 11\n"


def test_process_prefix(profile):
    lines = render_collapsed(profile, group="process").splitlines()
    assert "sha256sum [20];_start;sha256_block;page_fault_[k] 40" in lines
    threads = render_collapsed(profile, group="thread").splitlines()
    assert "python [10];worker [11];worker_loop (app.py:30);hot (app.py:12);memcpy 60" in threads


def test_parse_merges_repeats_and_rejects_garbage():
    assert parse_collapsed("a;b 1\n# comment\n\na;b 2\r\nc 4\n") == {("a", "b"): 3, ("c",): 4}
    with pytest.raises(ValueError, match="line 2"):
        parse_collapsed("a;b 1\na;b x\n")
