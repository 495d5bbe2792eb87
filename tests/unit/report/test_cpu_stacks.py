"""The CPU stacks' wholeness in the report: header words (text, HTML) and JSON numbers."""

from __future__ import annotations

import json

from kubeprof.model import Frame, FrameKind
from kubeprof.report import formats, header
from kubeprof.report.cpu_stacks import stack_counts, stack_note
from kubeprof.reportdata import Profile, Report, WeightedStack

MAIN = Frame("main", FrameKind.PYTHON, "/app/w.py", 1)
CUT = Frame("[native frames not unwound]", FrameKind.NATIVE)
DGEMM = Frame("dgemm_thread_nn", FrameKind.NATIVE, "/lib/libopenblas.so")
META = {
    "counter.cpu_unwind_cut_stack": "120",
    "counter.cpu_unwind_cut_cfi": "3",
    "counter.cpu_unwind_rooted": "118",
    "counter.cpu_native_threads": "73",
    "counter.cpu_python_missing": "1",
}


def _profile(meta: dict[str, str]) -> Profile:
    cpu = (WeightedStack((MAIN, CUT, DGEMM), 7, 7, "main", "python", 123, 1_230_000_000),)
    return Profile("s", 100, 1.0, cpu=cpu, meta=meta)


def test_every_counter_is_named_with_its_number():
    words = stack_note(META)
    assert words.startswith(
        "123 samples cut short of the thread's first frame, marked [native frames not unwound]"
        " (120 deeper than the 64 KiB stack copy, 3 through code without usable unwind tables)"
        "; 118 of them put back under their thread's root by their Python stack"
    )
    assert "73 samples of threads a C library started" in words
    assert "1 sample of Python threads without Python frames" in words
    assert "without a user stack" not in words  # not counted: not mentioned


def test_the_header_says_nothing_when_every_stack_was_whole():
    assert stack_note({}) == ""
    assert "CPU stacks" not in dict(header.profile_items(_profile({})))
    assert dict(header.profile_items(_profile(META)))["CPU stacks"] == stack_note(META)


def test_text_html_and_json_carry_the_counts():
    report = Report(_profile(META))
    assert "CPU stacks: 123 samples cut short" in formats.render(report, "text")
    assert "123 samples cut short of the thread" in formats.render(report, "html")
    doc = json.loads(formats.render(report, "json"))
    assert doc["cpu"]["stacks"] == {
        "cut": 123,
        "cut_at_copy_end": 120,
        "cut_without_unwind_tables": 3,
        "rooted_by_python_stack": 118,
        "native_thread_samples": 73,
        "python_frames_missing": 1,
        "no_user_stack": 0,
    }
    assert stack_counts({"counter.cpu_unwind_cut_cfi": "x"})["cut"] == 0  # unreadable: 0
