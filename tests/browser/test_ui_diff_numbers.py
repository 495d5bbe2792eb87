"""The web UI's diff view in a real browser shows `kubeprof diff -f json`'s numbers: the
same sides (GPU idle, findings), the same rows in the same order, each cell the CLI's
value as the text diff rounds it; the keep-CPython-frames box asks for the CLI's flag."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

KUBEPROF = str(Path(sys.executable).parent / "kubeprof")
NUMBERS = "document.getElementById('kp-diff-numbers').dataset.ready === '1'"
TABLES = """[...document.querySelectorAll('.kp-diff-table')].map(s => ({
  title: s.querySelector('h2').textContent,
  head: [...s.querySelectorAll('th')].map(th => th.textContent),
  rows: [...s.querySelectorAll('tbody tr')].map(tr => [...tr.cells].map(c => c.textContent)),
  more: s.querySelector('.kp-diff-more').hidden ? '' : s.querySelector('.kp-diff-more').textContent,
}))"""


def cli_diff(store: str, *flags: str) -> dict:
    run = subprocess.run(
        [KUBEPROF, "diff", "pageable_pinned", "pageable", "-f", "json", "--store", store, *flags],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def near(cell: str, value: float, digits: int) -> bool:
    """A cell's number is the CLI's value rounded to `digits` places."""
    return abs(float(cell) - value) <= 0.5 * 10**-digits + 1e-9


def check_cells(cells: list[str], row: dict, whole: list[float], self_only: bool) -> None:
    """self A (share), self B (share), change s, change pts[, the same for total]."""
    kinds = [("self_s", "self_change_s", "self_change_points")]
    if not self_only:
        kinds.append(("total_s", "total_change_s", "total_change_points"))
    for i, (both, change, points) in enumerate(kinds):
        got = cells[4 * i : 4 * i + 4]
        for side in (0, 1):
            secs, share = got[side].removesuffix("%)").split(" (")
            assert near(secs, row[both][side], 3), (got, row)
            assert near(share, 100 * row[both][side] / whole[side], 1), (got, row)
        assert near(got[2], row[change], 3) and near(got[3], row[points], 1), (got, row)


def test_ui_diff_view_shows_the_clis_numbers(browser, ui_url, ui_store, shots):
    want = cli_diff(ui_store)
    browser.goto(ui_url + "/diff?base=local/pageable_pinned&new=local/pageable&view=cpu", NUMBERS)
    for i, tag in enumerate("AB"):
        side = f"document.getElementById('kp-side-{tag}')"
        assert browser.eval(f"{side}.querySelector('h2').textContent") == (
            f"{tag}: {want['sessions'][i]}"
        )
        assert (
            browser.eval(f"{side}.querySelector('.kp-diff-idle').textContent")
            == (want["gpu_idle"][i])
        )
        found = browser.eval(f"[...{side}.querySelectorAll('li')].map(li => li.textContent)")
        assert found == (want["findings"][i] or ["none"])
    assert any("pageable" in f.lower() for f in want["findings"][1])  # B's pageable finding
    tables = browser.eval(TABLES)
    assert [t["title"].split(":")[0] for t in tables] == [t["title"] for t in want["tables"]]
    assert len(tables) == 3  # GPU sessions: functions, kernels, launching lines
    for page, cli in zip(tables, want["tables"], strict=True):
        assert len(page["head"]) == (5 if cli["self_only"] else 9)
        shown = page["rows"]
        assert len(shown) == min(20, len(cli["rows"]))
        assert [r[-1] for r in shown] == [r["name"] for r in cli["rows"][: len(shown)]]
        for cells, row in zip(shown, cli["rows"], strict=False):
            check_cells(cells[:-1], row, cli["whole_s"], cli["self_only"])
        if len(cli["rows"]) > 20:
            assert page["more"] == f"Show all {len(cli['rows'])} rows"
    browser.screenshot(shots / "ui-diff-numbers.png")
    if os.environ.get("KUBEPROF_DOCS_SHOTS"):  # docs/images/ui-diff.png's source
        browser.screenshot(Path(os.environ["KUBEPROF_DOCS_SHOTS"]) / "ui-diff.png")

    # The first table's biggest mover is where the copies went (pageable: slower, red).
    top = want["tables"][0]["rows"][0]
    assert top["self_change_s"] > 0 and top["name"].startswith("copy_batch")
    colour = browser.eval(
        "getComputedStyle(document.querySelector('.kp-diff-table tbody tr td')).color"
    )
    assert colour == "rgb(187, 0, 0)"

    # Rows by total change, and CPython's frames kept: the CLI's --sort/--keep-interpreter.
    browser.eval(
        "(() => { const s = document.getElementById('kp-diff-sort'); s.value = 'total';"
        " document.getElementById('kp-keep-interpreter').click(); })()"
    )
    browser.wait("location.search.includes('keep-interpreter=1')")
    browser.wait(NUMBERS)
    assert "sort=total" in browser.eval("location.search")
    want_total = cli_diff(ui_store, "--sort", "total", "--keep-interpreter")
    names = browser.eval(
        "[...document.querySelector('.kp-diff-table tbody').rows].map(r => r.lastChild.textContent)"
    )
    assert names == [r["name"] for r in want_total["tables"][0]["rows"][: len(names)]]
