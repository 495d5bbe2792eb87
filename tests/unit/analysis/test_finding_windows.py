"""Every finding names the window it was computed over and that window's length.

A share ("idle 52 %") means nothing without what it is a share of: the steady state of a
3 s loop or the active window of a serving process. Each H200 recording in
tests/fixtures/gpu/truth (and truth/offcpu) is replayed through the real analysis; every
finding it raises must carry the analysed window's kind, seconds and step (or burst) count,
and between them the recordings raise every finding kind, so none escapes the check.
"""

from __future__ import annotations

from functools import cache

import pytest
import trace_io

from conftest import FIXTURES
from kubeprof.analysis import cpu_samples as cs
from kubeprof.analysis.findings import Analysis, Kind, Window, analyse

TRUTH = FIXTURES / "truth"
RECORDINGS = sorted(
    str(p.relative_to(TRUTH)).removesuffix(".jsonl.gz")
    for p in (*TRUTH.glob("*.jsonl.gz"), *TRUTH.glob("offcpu/*.jsonl.gz"))
)


@cache
def run(name: str) -> Analysis:
    tr = trace_io.load_trace(TRUTH / f"{name}.jsonl.gz")
    sm = tr.meta.get("session_meta") or {}
    hz = float(sm.get("cpu_hz", 99) or 99)
    cpu = (
        cs.from_samples(tr.samples, hz=hz, source=sm.get("cpu_source", "")) if tr.samples else None
    )
    window = Window(tr.meta["session_start_ns"], tr.meta["session_end_ns"])
    return analyse(tr.activities, tr.metrics, cpu, window, offcpu=tr.offcpu)


def expected_window(a: Analysis) -> str:
    secs = f"{a.phases.steady.duration_ns / 1e9:.2f} s"
    if a.phases.loop:
        return f"the steady state ({secs}, {a.phases.steps} steps)"
    return f"the active window after warm-up ({secs}, {a.phases.steps} bursts of GPU work)"


@pytest.mark.parametrize("name", RECORDINGS)
def test_each_finding_names_its_window_and_length(name):
    a = run(name)
    words = expected_window(a)
    assert a.phases.steady.duration_ns > 0 and a.phases.steps > 0
    for f in a.findings:
        assert words in f.message, (f.kind, f.message)


def test_the_recordings_raise_every_finding_kind():
    assert len(RECORDINGS) >= 12
    seen = {f.kind for name in RECORDINGS for f in run(name).findings}
    assert seen == set(Kind), set(Kind) - seen


def test_a_serving_window_is_named_as_such_not_as_a_steady_state():
    a = run("serve")
    assert not a.phases.loop and a.findings
    for f in a.findings:
        assert "active window after warm-up (" in f.message and "steady state" not in f.message
