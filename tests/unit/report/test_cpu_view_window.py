"""The CPU view follows the window the GPU analysis judged: the H200 serving recording's
CPU profile is its serving loop, not the imports and model set-up before it; one flag
(`--whole-session`) shows the whole session."""

from __future__ import annotations

import pytest

from kubeprof import reporting
from kubeprof.report.formats import render
from kubeprof.report.text import function_times

from .truth_store import TRUTH, store_fixture

pytestmark = pytest.mark.skipif(not TRUTH.is_dir(), reason="no tests/fixtures/gpu/truth")


def _top_self(report: reporting.Report, n: int = 5) -> list[str]:
    self_ns, _ = function_times(report.profile.cpu)
    return [k[1] for k in sorted(self_ns, key=lambda k: -self_ns[k])[:n]]


def test_serving_loop_not_start_up(tmp_path):
    url = f"sqlite:///{tmp_path / 'kp.db'}"
    truth = store_fixture(url, "serve")
    whole = reporting.load(url, "serve", whole_session=True)
    cut = reporting.load(url, "serve")
    assert "_call_with_frames_removed" in _top_self(whole)  # importlib leads the session
    top = _top_self(cut)
    assert "_call_with_frames_removed" not in top
    assert set(truth["host_functions"].values()) & {name for name in top}
    a = cut.analysis
    assert a is not None and not a.phases.loop
    n_cut = sum(ws.samples for ws in cut.profile.cpu)
    assert 0 < n_cut < sum(ws.samples for ws in whole.profile.cpu)
    note = cut.profile.meta[reporting.CPU_WINDOW]
    assert "active window after warm-up" in note and f"{n_cut:,} of" in note
    assert "--whole-session" in note and reporting.CPU_WINDOW not in whole.profile.meta
    text = render(cut, "text")
    assert isinstance(text, str) and "--whole-session" in text
    assert cut.profile.gpu == whole.profile.gpu  # the GPU view is not cut
