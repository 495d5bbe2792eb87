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


def test_diff_says_which_window_its_cpu_rows_cover(tmp_path, capsys):
    """`kubeprof diff` compares the CPU rows `report` shows (the GPU window by default) and
    says so per side; `--whole-session` compares whole sessions."""
    import json

    from kubeprof import cli

    url = f"sqlite:///{tmp_path / 'kp.db'}"
    store_fixture(url, "serve")
    store_fixture(url, "compute")
    assert cli.main(["diff", "serve", "compute", "-f", "json", "--store", url]) == 0
    cut = json.loads(capsys.readouterr().out)
    assert (
        cli.main(["diff", "serve", "compute", "-f", "json", "--store", url, "--whole-session"]) == 0
    )
    whole = json.loads(capsys.readouterr().out)
    assert "active window after warm-up" in cut["cpu_window"][0]
    assert whole["cpu_window"] == ["whole session", "whole session"]
    cpu_cut, cpu_whole = cut["tables"][0], whole["tables"][0]
    assert cpu_cut["title"] == cpu_whole["title"] == "CPU time per function"
    assert cpu_cut["whole_s"][0] < cpu_whole["whole_s"][0]
    assert cli.main(["diff", "serve", "compute", "--store", url]) == 0
    text = capsys.readouterr().out
    assert "CPU rows cover" in text and "active window after warm-up" in text
