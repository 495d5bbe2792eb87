"""Two sessions compared with numbers: per function, per kernel, per launching line.

Each row holds a name's self and total time in both sessions; the change is given in
seconds and in points (its share of each session's own total, so runs of different
lengths compare). Rows are sorted by the absolute change of self time, where the time
itself went (as `pprof -diff_base` does), or of total time on request. The GPU
steady-state idle and the findings of both sit side by side.
Pure: two Reports in, one SessionDiff out (diff_render.py writes it as text, JSON, HTML).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kubeprof.model import FrameKind
from kubeprof.report.text import function_key, function_label, function_times
from kubeprof.report.units import in_unit, percent
from kubeprof.reportdata import CPU_WINDOW, Report, WeightedStack


@dataclass(frozen=True, slots=True)
class Row:
    """One name in both sessions; times in ns, `total_*` the base of the points."""

    name: str
    a_self_ns: int
    a_total_ns: int
    b_self_ns: int
    b_total_ns: int

    def change_s(self, which: str = "self") -> float:
        """B minus A in seconds."""
        a, b = (
            (self.a_self_ns, self.b_self_ns)
            if which == "self"
            else (self.a_total_ns, self.b_total_ns)
        )
        return (b - a) / 1e9


@dataclass(frozen=True, slots=True)
class Table:
    """One kind of rows (functions, kernels, launching lines) with each session's total."""

    title: str
    a_whole_ns: int  # the view's total in session A: the base of A's percentages
    b_whole_ns: int
    rows: tuple[Row, ...]
    self_only: bool = False  # GPU time per kernel or line: self and total are the same

    def points(self, row: Row, which: str = "self") -> float:
        """The change of the row's share of its session's total, in percentage points."""
        a, b = (
            (row.a_self_ns, row.b_self_ns) if which == "self" else (row.a_total_ns, row.b_total_ns)
        )
        return 100.0 * (_share(b, self.b_whole_ns) - _share(a, self.a_whole_ns))


@dataclass(frozen=True, slots=True)
class Side:
    """What each session says in one line: its steady-state GPU idle and its findings."""

    session: str
    duration_s: float
    idle: str  # e.g. "GPU idle 14.0 % of 11 steady steps", or why it is not measured
    findings: tuple[str, ...]  # "severity: message", most severe first
    # what the CPU rows cover: "whole session", or the GPU window they were cut to
    cpu_window: str = "whole session"


@dataclass(frozen=True, slots=True)
class SessionDiff:
    a: Side
    b: Side
    tables: tuple[Table, ...]  # CPU functions; with GPU data also kernels and launching lines
    by: str = "self"  # rows sorted by the absolute change of "self" or "total" time


RowsOf = Callable[[Sequence[WeightedStack]], dict[str, tuple[int, int]]]


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _rows(
    a: dict[str, tuple[int, int]],
    b: dict[str, tuple[int, int]],
    by: str,
) -> tuple[Row, ...]:
    rows = [Row(name, *a.get(name, (0, 0)), *b.get(name, (0, 0))) for name in a.keys() | b.keys()]

    def change(r: Row) -> tuple[int, int]:
        d_self, d_total = abs(r.b_self_ns - r.a_self_ns), abs(r.b_total_ns - r.a_total_ns)
        return (d_total, d_self) if by == "total" else (d_self, d_total)

    rows.sort(key=lambda r: (-change(r)[0], -change(r)[1], r.name))
    return tuple(rows)


def _functions(stacks: Sequence[WeightedStack]) -> dict[str, tuple[int, int]]:
    self_ns, total_ns = function_times(stacks)
    return {function_label(k): (self_ns.get(k, 0), total) for k, total in total_ns.items()}


def _kernels(stacks: Sequence[WeightedStack]) -> dict[str, tuple[int, int]]:
    """GPU time per kernel (or copy, memset): the leaf of each GPU-view stack."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for ws in stacks:
        if ws.stack and ws.stack[-1].kind is FrameKind.GPU:
            acc = out[function_label(function_key(ws.stack[-1]))]
            acc[0] += ws.value_ns
            acc[1] += ws.value_ns
    return {k: (v[0], v[1]) for k, v in out.items()}


def launch_line(ws: WeightedStack) -> str:
    """The innermost Python frame (file:line) that launched the GPU work of a stack."""
    for frame in reversed(ws.stack):
        if frame.kind is FrameKind.PYTHON:
            return frame.label()
    return "(no Python frame in the launching stack)"


def _lines(stacks: Sequence[WeightedStack]) -> dict[str, tuple[int, int]]:
    """GPU time per launching Python line."""
    out: dict[str, int] = defaultdict(int)
    for ws in stacks:
        out[launch_line(ws)] += ws.value_ns
    return {k: (v, v) for k, v in out.items()}


def _side(report: Report) -> Side:
    a = report.analysis
    idle = "GPU idle: not measured (no GPU data)"
    if a is not None:
        h = a.headline
        if h.ratio is not None:
            idle = (
                f"GPU idle {percent(h.ratio)} of the steady state "
                f"({in_unit(h.window.end_ns - h.window.start_ns, 's', 2)})"
            )
        else:
            idle = f"GPU idle: not measured ({h.reason})"
    findings = tuple(f"{f.severity.value}: {f.message}" for f in (a.findings if a else ()))
    window = report.profile.meta.get(CPU_WINDOW) or "whole session"
    return Side(report.session, report.profile.duration_s, idle, findings, window)


def diff_reports(a: Report, b: Report, *, by: str = "self") -> SessionDiff:
    """The comparison of session A (before) with session B (after); rows sorted by the
    absolute change of self time (`by="total"`: of total time), the other as tie-break."""
    pa, pb = a.profile, b.profile

    def table(
        title: str, rows_of: RowsOf, sa: Sequence[WeightedStack], sb: Sequence[WeightedStack]
    ) -> Table:
        return Table(
            title,
            sum(ws.value_ns for ws in sa),
            sum(ws.value_ns for ws in sb),
            _rows(rows_of(sa), rows_of(sb), by),
            self_only=rows_of is not _functions,
        )

    tables = [table("CPU time per function", _functions, pa.cpu, pb.cpu)]
    if pa.gpu or pb.gpu:
        tables.append(table("GPU time per kernel", _kernels, pa.gpu, pb.gpu))
        tables.append(table("GPU time per launching line", _lines, pa.gpu, pb.gpu))
    return SessionDiff(_side(a), _side(b), tuple(tables), by)
