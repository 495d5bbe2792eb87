"""`kubeprof diff`'s numbers on a profile with known shares (sample_profile.py)."""

from __future__ import annotations

import dataclasses
import json

from kubeprof.report.diff_render import render_diff_html, render_diff_json, render_diff_text
from kubeprof.report.session_diff import diff_reports
from kubeprof.reportdata import Report

from .sample_profile import COLD, HOT, MAIN, make_profile, ws


def _after() -> Report:
    """B: `hot` halved (80 -> 40 samples under main), `cold` tripled (20 -> 60)."""
    p = make_profile()
    cpu = (ws((MAIN, HOT), 40), ws((MAIN, COLD), 60), *p.cpu[2:])
    return Report(dataclasses.replace(p, session="after", cpu=cpu))


def _rows(d, title):
    table = next(t for t in d.tables if t.title == title)
    return table, {r.name: r for r in table.rows}


def test_functions_in_both_with_seconds_and_points():
    d = diff_reports(Report(make_profile()), _after())
    t, rows = _rows(d, "CPU time per function")
    hot, cold = rows["hot (app.py)"], rows["cold (app.py)"]
    # A: 200 samples of 10 ms; hot self 80 + 0 (worker's hot is under memcpy) = 0.8 s.
    assert (hot.a_self_ns, hot.b_self_ns) == (800_000_000, 400_000_000)
    assert (hot.a_total_ns, hot.b_total_ns) == (1_400_000_000, 1_000_000_000)
    assert hot.change_s() == -0.4 and round(t.points(hot), 6) == -20.0  # 40 % -> 20 %
    assert (cold.a_self_ns, cold.b_self_ns) == (200_000_000, 600_000_000)
    assert round(t.points(cold), 6) == 20.0  # 10 % of 2 s -> 30 % of 2 s
    # Sorted by the absolute change of self time; unchanged functions last.
    assert {r.name for r in t.rows[:2]} == {"hot (app.py)", "cold (app.py)"}
    assert all(r.change_s() == 0 for r in t.rows[2:])


def test_gpu_sessions_get_kernel_and_launching_line_tables():
    d = diff_reports(Report(make_profile()), _after())
    _, kernels = _rows(d, "GPU time per kernel")
    assert kernels["sgemm_[gpu]"].a_self_ns == 3_000_000
    _, lines = _rows(d, "GPU time per launching line")
    assert lines["step (app.py:40)"].a_self_ns == 4_000_000
    cpu_only = dataclasses.replace(make_profile(), gpu=())
    assert [t.title for t in diff_reports(Report(cpu_only), Report(cpu_only)).tables] == [
        "CPU time per function"
    ]


def test_text_json_and_html_show_the_same_rows():
    d = diff_reports(Report(make_profile()), _after())
    text = render_diff_text(d, top=2)
    assert text.index("hot (app.py)") < text.index("== GPU time per kernel")
    row = next(line for line in text.splitlines() if line.endswith("  hot (app.py)"))
    assert row.split()[:6] == ["0.800", "(40.0%)", "0.400", "(20.0%)", "-0.400", "-20.0"]
    assert "more rows; --top N shows more" in text
    data = json.loads(render_diff_json(d))
    assert data["sessions"] == ["unit-session", "after"]
    first = data["tables"][0]["rows"][:2]
    assert {r["name"] for r in first} == {"hot (app.py)", "cold (app.py)"}
    hot = next(r for r in first if r["name"] == "hot (app.py)")
    assert hot["self_s"] == [0.8, 0.4] and hot["self_change_points"] == -20.0
    page = render_diff_html(d)
    assert '<td class="name">hot (app.py)</td>' in page and "GPU idle: not measured" in page
    weird = dataclasses.replace(make_profile(), session="<b>x</b>")
    assert "<b>x</b>" not in render_diff_html(diff_reports(Report(weird), _after()))
