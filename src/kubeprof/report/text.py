"""Terminal summary: where the time went, by process, thread, function and stack.

All percentages are of the view's whole total (so numbers in different sections add up
against the same base). Rows are ordered by value, then by label, so output is
deterministic; lines are cut to ``width`` columns.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Sequence

from kubeprof.model import Frame, FrameKind
from kubeprof.report.units import percent
from kubeprof.report.views import available_views, format_ns, view_info, view_stacks
from kubeprof.reportdata import Profile, WeightedStack

FuncKey = tuple[str, str, str]  # (kind, name, file): functions merge across line numbers


def function_key(frame: Frame) -> FuncKey:
    """Functions are named by kind, name and (for Python) file; lines are merged."""
    keep_file = frame.kind is FrameKind.PYTHON or frame.name == "[unknown]"
    return (frame.kind.value, frame.name, frame.file if keep_file else "")


def function_label(key: FuncKey) -> str:
    """One-line function name, like Frame.label() without the line number."""
    kind, name, file = key
    return Frame(name, FrameKind(kind), file).label()


def fit(text: str, width: int) -> str:
    """Cut a line to `width` columns, marking the cut with '...'; 0 cuts nothing."""
    return text if width <= 0 or len(text) <= width else text[: max(width - 3, 0)] + "..."


# A table's fixed-width percentage: ` 12.50%`; 0 of 0 is 0 %.
pct = functools.partial(percent, digits=2, width=6, sign="%")


def function_times(
    stacks: Iterable[WeightedStack],
) -> tuple[dict[FuncKey, int], dict[FuncKey, int]]:
    """Self and total value_ns per function; recursion counts once towards total."""
    self_ns: dict[FuncKey, int] = defaultdict(int)
    total_ns: dict[FuncKey, int] = defaultdict(int)
    stacks = stacks if isinstance(stacks, Sequence) else tuple(stacks)  # alive: ids hold
    keys: dict[int, FuncKey] = {}  # by the frame's identity: stacks share their frames
    stack_keys: dict[int, set[FuncKey]] = {}  # and by the stack's: threads share stacks
    for ws in stacks:
        if not ws.stack:
            continue
        own = stack_keys.get(id(ws.stack))
        if own is None:
            own = stack_keys[id(ws.stack)] = {_key_of(f, keys) for f in ws.stack}
        self_ns[_key_of(ws.stack[-1], keys)] += ws.value_ns
        for key in own:
            total_ns[key] += ws.value_ns
    return self_ns, total_ns


def _key_of(frame: Frame, keys: dict[int, FuncKey]) -> FuncKey:
    """function_key(frame), looked up by the frame's identity first (the caller keeps the
    frames alive while ``keys`` is used)."""
    key = keys.get(id(frame))
    if key is None:
        key = keys[id(frame)] = function_key(frame)
    return key


# The chain from process entry to the program's own code: at the root of nearly every
# stack, so near 100 % by total and telling nothing. Hidden from "top by total" where they
# form a stack's root prefix, unless the report is asked for them (--startup-frames).
STARTUP_FRAMES = frozenset(
    {
        "<module>",
        "main",
        "_start",
        "__libc_start_main",
        "__libc_start_call_main",
        "Py_BytesMain",
        "Py_RunMain",
        "Py_Main",
        "pymain_main",
        "pymain_run_python",
        "pymain_run_file",
        "pymain_run_file_obj",
        "pymain_run_command",
        "pymain_run_module",
        "_PyRun_SimpleFileObject",
        "_PyRun_AnyFileObject",
        "PyRun_SimpleFileExFlags",
        "PyRun_AnyFileExFlags",
        "PyRun_SimpleStringFlags",
        "run_mod",
        "run_eval_code_obj",
        "PyEval_EvalCode",
        "start_thread",
        "clone",
        "clone3",
        "thread_run",
        "pythread_wrapper",
    }
)


def startup_keys(stacks: Iterable[WeightedStack]) -> set[FuncKey]:
    """Functions seen only in stacks' start-up root prefixes (STARTUP_FRAMES from the root
    up to the first other frame); one seen anywhere else is real work and stays."""
    prefix: set[FuncKey] = set()
    elsewhere: set[FuncKey] = set()
    for ws in stacks:
        in_prefix = True
        last = len(ws.stack) - 1
        for i, frame in enumerate(ws.stack):  # root first; the leaf is work, never start-up
            in_prefix = in_prefix and i < last and frame.name in STARTUP_FRAMES
            (prefix if in_prefix else elsewhere).add(function_key(frame))
    return prefix - elsewhere


def _ranked(values: dict, top: int) -> list:
    """Keys by value descending, then by label, at most `top`."""
    return sorted(values, key=lambda k: (-values[k], str(k)))[:top]


def function_table(
    stacks: Sequence[WeightedStack],
    total: int,
    *,
    by: str,
    top: int,
    width: int,
    indent: str,
    startup: bool = True,
) -> list[str]:
    """Top functions by "self" or "total" time, with both percentages; without `startup`,
    "total" leaves out the start-up frames (`startup_keys`) and says so."""
    self_ns, total_ns = function_times(stacks)
    hidden = startup_keys(stacks) if by == "total" and not startup else set()
    if hidden:
        total_ns = defaultdict(int, {k: v for k, v in total_ns.items() if k not in hidden})
    ranked = _ranked(self_ns if by == "self" else total_ns, top)
    ranked = [k for k in ranked if (self_ns if by == "self" else total_ns)[k] > 0]
    lines = [
        f"{indent}Top functions by {by} time",
        f"{indent}  self%   total%       self  function",
    ]
    for key in ranked:
        row = (
            f"{indent}{pct(self_ns.get(key, 0), total)} {pct(total_ns[key], total)} "
            f"{format_ns(self_ns.get(key, 0)):>10}  {function_label(key)}"
        )
        lines.append(fit(row, width))
    if hidden:
        names = ", ".join(sorted({key[1] for key in hidden}))
        lines.append(
            fit(
                f"{indent}  (start-up frames not ranked: {names}; --startup-frames ranks them)",
                width,
            )
        )
    return lines


def stack_table(
    stacks: Sequence[WeightedStack], total: int, *, top: int, width: int, indent: str
) -> list[str]:
    """Top distinct stacks (merged across threads), leaf first."""
    merged: dict[tuple[str, ...], list[int]] = {}
    for ws in stacks:
        key = tuple(f.label() for f in reversed(ws.stack)) or ("[empty stack]",)
        acc = merged.setdefault(key, [0, 0])
        acc[0] += ws.value_ns
        acc[1] += ws.samples
    ranked = sorted(merged, key=lambda k: (-merged[k][0], k))[:top]
    lines = [
        f"{indent}Top stacks (leaf <- caller <- ... <- root)",
        f"{indent}  total%    count  stack",
    ]
    for key in ranked:
        value, count = merged[key]
        lines.append(fit(f"{indent}{pct(value, total)} {count:>8}  {' <- '.join(key)}", width))
    return lines


def _group(stacks: Iterable[WeightedStack], key: str) -> dict[tuple, list[WeightedStack]]:
    """Stacks by process (pid, name) or by thread (tid, name)."""
    groups: dict[tuple, list[WeightedStack]] = defaultdict(list)
    for ws in stacks:
        groups[(ws.pid, ws.process) if key == "process" else (ws.tid, ws.thread)].append(ws)
    return groups


def _by_value(groups: dict[tuple, list[WeightedStack]]) -> list[tuple]:
    totals = {k: sum(ws.value_ns for ws in v) for k, v in groups.items()}
    return sorted(groups, key=lambda k: (-totals[k], k))


def render_view(
    profile: Profile, view: str, *, top: int = 10, width: int = 100, startup: bool = False
) -> list[str]:
    """One view's sections: processes, then per process its functions, threads and stacks
    (threads only when the process has more than one: one thread's tables are its own)."""
    info = view_info(view)
    stacks = view_stacks(profile, view)
    total = sum(ws.value_ns for ws in stacks)
    count = sum(ws.samples for ws in stacks)
    lines = [f"== {info.title}: {format_ns(total)} in {count} {info.count_unit} ==", ""]
    if not stacks:
        return [*lines, "(no data)", ""]
    processes = _group(stacks, "process")
    lines.append("Processes")
    lines.append("  total%       time    count  process")
    for pid, name in _by_value(processes):
        members = processes[(pid, name)]
        value = sum(ws.value_ns for ws in members)
        n = sum(ws.samples for ws in members)
        lines.append(
            fit(f"{pct(value, total)} {format_ns(value):>10} {n:>8}  {name} [{pid}]", width)
        )
    for pid, name in _by_value(processes):
        members = processes[(pid, name)]
        value = sum(ws.value_ns for ws in members)
        lines += ["", fit(f"-- process {name} [{pid}]: {pct(value, total).strip()} --", width)]
        lines += function_table(members, total, by="self", top=top, width=width, indent="")
        lines += function_table(
            members, total, by="total", top=top, width=width, indent="", startup=startup
        )
        lines += stack_table(members, total, top=top, width=width, indent="")
        threads = _group(members, "thread")
        shown = _by_value(threads)[:top] if len(threads) > 1 else []
        for tid, tname in shown:
            tstacks = threads[(tid, tname)]
            tvalue = sum(ws.value_ns for ws in tstacks)
            lines += ["", fit(f"   thread {tname} [{tid}]: {pct(tvalue, total).strip()}", width)]
            sub = max(3, top // 2)
            lines += function_table(tstacks, total, by="self", top=sub, width=width, indent="   ")
            lines += function_table(
                tstacks, total, by="total", top=sub, width=width, indent="   ", startup=startup
            )
        if len(threads) > max(len(shown), 1):
            lines.append(f"   ({len(threads) - len(shown)} more threads not shown)")
    return [*lines, ""]


def render_text(
    profile: Profile,
    *,
    view: str | None = None,
    top: int = 10,
    width: int = 100,
    preamble: Sequence[str] = (),
    startup: bool = False,
) -> str:
    """The terminal report; both CPU and GPU views unless `view` names one. `width` 0 cuts
    no line; `startup` ranks start-up frames (`<module>`, `main`, ...) by total too.

    `preamble` (the findings and the GPU idle headline) goes between the header and the tables.
    """
    from kubeprof.report.header import other_items, profile_items

    views = [view] if view else available_views(profile)
    cpu_n = sum(ws.samples for ws in profile.cpu)
    head = [
        fit(f"kubeprof report: {profile.session}", width),
        fit(
            f"duration {profile.duration_s:.1f} s, {profile.hz} Hz, {cpu_n} CPU samples"
            + (
                f", {sum(ws.samples for ws in profile.gpu)} GPU launches"
                if profile.gpu or profile.meta.get("gpu") == "True"
                else ""
            )
            + (
                f", {sum(ws.samples for ws in profile.offcpu)} off-CPU waits"
                if profile.offcpu
                else ""
            ),
            width,
        ),
        *(
            fit(f"{k}: {v}", width)
            for k, v in (*profile_items(profile), *other_items(profile))
            if k not in ("duration", "CPU time", "GPU time")
        ),
        "Percentages are of each view's total.",
        "",
    ]
    body = [
        line
        for v in views
        for line in render_view(profile, v, top=top, width=width, startup=startup)
    ]
    return "\n".join(head + list(preamble) + body)
