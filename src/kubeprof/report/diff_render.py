"""`kubeprof diff A B` written out: a terminal table, JSON, or a standalone HTML page.

All three show the same rows in the same order (session_diff sorts them); text and HTML
show the first `top` rows of each table, JSON every row.
"""

from __future__ import annotations

import functools
import html
import json

from kubeprof.report.session_diff import Row, SessionDiff, Side, Table
from kubeprof.report.text import fit
from kubeprof.report.units import percent


def _s(ns: int) -> str:
    return f"{ns / 1e9:.3f}"


_pct = functools.partial(percent, sign="")  # inside "(12.5%)"


def _signed(value: float, digits: int) -> str:
    return f"{value:+.{digits}f}"


def _head(t: Table) -> list[str]:
    return ["A s", "B s", "Δ s", "Δ pts"] if t.self_only else HEAD


def _cells(t: Table, r: Row) -> list[str]:
    """self A, self B, change s, change pts[, total A, total B, total change s, pts]."""
    cells = [
        f"{_s(r.a_self_ns)} ({_pct(r.a_self_ns, t.a_whole_ns)}%)",
        f"{_s(r.b_self_ns)} ({_pct(r.b_self_ns, t.b_whole_ns)}%)",
        _signed(r.change_s(), 3),
        _signed(t.points(r), 1),
        f"{_s(r.a_total_ns)} ({_pct(r.a_total_ns, t.a_whole_ns)}%)",
        f"{_s(r.b_total_ns)} ({_pct(r.b_total_ns, t.b_whole_ns)}%)",
        _signed(r.change_s("total"), 3),
        _signed(t.points(r, "total"), 1),
    ]
    return cells[:4] if t.self_only else cells


HEAD = ["self A s", "self B s", "Δ s", "Δ pts", "total A s", "total B s", "Δ s", "Δ pts"]


def _sides_text(a: Side, b: Side) -> list[str]:
    lines = [
        f"A: {a.session} ({a.duration_s:.1f} s)",
        f"B: {b.session} ({b.duration_s:.1f} s)",
        "",
        "CPU rows cover",
        f"  A: {a.cpu_window}",
        f"  B: {b.cpu_window}",
        "",
        "GPU idle (steady state)",
        f"  A: {a.idle}",
        f"  B: {b.idle}",
        "",
        "Findings",
    ]
    for tag, side in (("A", a), ("B", b)):
        lines += [f"  {tag}: {f}" for f in side.findings] or [f"  {tag}: none"]
    return [*lines, ""]


def render_diff_text(d: SessionDiff, *, top: int = 20, width: int = 0) -> str:
    """Headline and findings of both, then each table's `top` rows by absolute change."""
    lines = [
        f"kubeprof diff: {d.a.session} -> {d.b.session}",
        f"Δ = B - A; points (pts) are each session's share of its own total; rows by |Δ {d.by}|.",
        "",
        *_sides_text(d.a, d.b),
    ]
    for t in d.tables:
        lines.append(
            f"== {t.title}: A {_s(t.a_whole_ns)} s, B {_s(t.b_whole_ns)} s "
            f"({_signed((t.b_whole_ns - t.a_whole_ns) / 1e9, 3)} s) =="
        )
        rows = [_cells(t, r) for r in t.rows[:top]]
        head = _head(t)
        widths = [max([len(h)] + [len(c[i]) for c in rows]) for i, h in enumerate(head)]
        lines.append(
            fit("  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)) + "  name", width)
        )
        for r, cells in zip(t.rows, rows, strict=False):
            lines.append(
                fit(
                    "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))
                    + f"  {r.name}",
                    width,
                )
            )
        if len(t.rows) > top:
            lines.append(f"({len(t.rows) - top} more rows; --top N shows more)")
        lines.append("")
    return "\n".join(lines)


def _row_json(t: Table, r: Row) -> dict[str, object]:
    return {
        "name": r.name,
        "self_s": [r.a_self_ns / 1e9, r.b_self_ns / 1e9],
        "self_change_s": r.change_s(),
        "self_change_points": round(t.points(r), 3),
        "total_s": [r.a_total_ns / 1e9, r.b_total_ns / 1e9],
        "total_change_s": r.change_s("total"),
        "total_change_points": round(t.points(r, "total"), 3),
    }


def diff_dict(d: SessionDiff) -> dict[str, object]:
    """Everything, every row: `sessions`, `gpu_idle`, `findings` as [A, B] pairs (what
    `kubeprof diff -f json` writes and the web UI's diff view reads)."""
    return {
        "sessions": [d.a.session, d.b.session],
        "duration_s": [d.a.duration_s, d.b.duration_s],
        "gpu_idle": [d.a.idle, d.b.idle],
        "cpu_window": [d.a.cpu_window, d.b.cpu_window],
        "findings": [list(d.a.findings), list(d.b.findings)],
        "sort": d.by,
        "tables": [
            {
                "title": t.title,
                "self_only": t.self_only,
                "whole_s": [t.a_whole_ns / 1e9, t.b_whole_ns / 1e9],
                "rows": [_row_json(t, r) for r in t.rows],
            }
            for t in d.tables
        ],
    }


def render_diff_json(d: SessionDiff) -> str:
    """`diff_dict` as indented JSON."""
    return json.dumps(diff_dict(d), indent=1) + "\n"


_CSS = """body{font:14px system-ui,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin:8px 0 24px}td,th{padding:3px 8px;border-bottom:1px solid #ddd}
td.n{text-align:right;font-variant-numeric:tabular-nums}.up{color:#b00}.down{color:#06c}
.sides{display:grid;grid-template-columns:1fr 1fr;gap:16px}.side{border:1px solid #ccc;padding:8px}
td.name{font-family:monospace}"""


def render_diff_html(d: SessionDiff, *, top: int = 50) -> str:
    """A standalone page: both sessions side by side, then the tables (red: B slower)."""
    e = html.escape
    sides = "".join(
        f'<div class="side" id="side-{tag}"><h2>{tag}: {e(s.session)}</h2>'
        f"<p>{s.duration_s:.1f} s; CPU rows: {e(s.cpu_window)}</p><p class=idle>{e(s.idle)}</p><ul>"
        + ("".join(f"<li>{e(f)}</li>" for f in s.findings) or "<li>no findings</li>")
        + "</ul></div>"
        for tag, s in (("A", d.a), ("B", d.b))
    )
    parts = [
        f"<!DOCTYPE html><html><head><meta charset=utf-8><title>kubeprof diff "
        f"{e(d.a.session)} → {e(d.b.session)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{e(d.a.session)} → {e(d.b.session)}</h1><p>Δ = B − A; points are each "
        f"session's share of its own total; rows by |Δ {d.by}|.</p>",
        f'<div class="sides">{sides}</div>',
    ]
    for t in d.tables:
        parts.append(
            f"<h2>{e(t.title)}: A {_s(t.a_whole_ns)} s, B {_s(t.b_whole_ns)} s</h2>"
            "<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in _head(t)) + "<th>name</th></tr>"
        )
        for r in t.rows[:top]:
            cls = "up" if r.b_self_ns > r.a_self_ns else "down" if r.b_self_ns < r.a_self_ns else ""
            parts.append(
                f'<tr class="{cls}">'
                + "".join(f'<td class="n">{e(c)}</td>' for c in _cells(t, r))
                + f'<td class="name">{e(r.name)}</td></tr>'
            )
        parts.append("</table>")
        if len(t.rows) > top:
            parts.append(f"<p>{len(t.rows) - top} more rows (--top N shows more).</p>")
    parts.append("</body></html>\n")
    return "".join(parts)
