"""Plain-text sections of the findings analysis: findings first, then the GPU idle headline
with its phases, the 100 ms timeline, the idle breakdown and the CPU stacks during idle.

A figure with no data behind it reads "not measured" with the reason, never 0 % or 100 %.
"""

from __future__ import annotations

import textwrap

from kubeprof.analysis.energy import explain
from kubeprof.analysis.findings import Analysis, Finding
from kubeprof.analysis.idle_breakdown import IdleBreakdown
from kubeprof.analysis.steady_idle import Timeline
from kubeprof.report.evidence import (
    figure_text,
    number,
    number_name,
    pct,
    seconds,
    title,
)
from kubeprof.reportdata import Report

_BLOCKS = " ▁▂▃▄▅▆▇█"
PHASE_MARKS = (("startup", "s"), ("warmup", "w"), ("steady", "="), ("tail", "t"))
PHASE_NAMES = {"startup": "start-up", "warmup": "warm-up", "steady": "steady", "tail": "tail"}
TIMELINE_CELLS = 90


def _wrap(text: str, width: int, indent: str) -> list[str]:
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent) or [indent]


def finding_lines(n: int, f: Finding, width: int) -> list[str]:
    """One finding: severity and title, the message, evidence, estimated gain and its model."""
    out = [f"{n}. [{f.severity.value.upper()}] {title(f.kind)}"]
    out += _wrap(f.message, width, "   ")
    ev = f.evidence
    if ev.numbers:
        nums = ", ".join(f"{number_name(k)} {number(k, v)}" for k, v in ev.numbers.items())
        out += _wrap(f"evidence: {nums}", width, "   ")
    if ev.frames:
        out += _wrap("CPU frames during idle: " + "; ".join(ev.frames), width, "   ")
    for line in ev.lines:
        out += _wrap(f"source line: {line}", width, "   ")
    for k in ev.kernels:
        out += _wrap(f"kernel: {k}", width, "   ")
    if f.gain is not None:
        g = f.gain
        out += _wrap(
            f"estimated gain: {seconds(g.saved_ns)} ({pct(g.share)} of the analysed window); "
            f"model: {g.model}",
            width,
            "   ",
        )
    else:
        out.append("   estimated gain: none given (no honest model for it)")
    return out


def findings_text(a: Analysis, width: int = 100) -> list[str]:
    """The Findings section (most severe first)."""
    out = ["Findings", "========"]
    if a.headline.ratio is None and not a.findings:
        out.append(f"none: GPU idle is {figure_text(a.headline)}")
    elif a.verdict:
        out += _wrap(a.verdict, width, "")
    elif not a.findings:
        out.append("none: nothing in this session matched a known problem")
    for n, f in enumerate(a.findings, 1):
        out += finding_lines(n, f, width)
    return [*out, ""]


def timeline_strip(tl: Timeline, a: Analysis, cells: int = TIMELINE_CELLS) -> tuple[str, str, int]:
    """(busy strip, phase-mark strip, buckets per cell) of the 100 ms timeline."""
    n = len(tl.busy_ns)
    if not n or not tl.devices:
        return "", "", 1
    per = max(1, -(-n // cells))
    busy, marks = [], []
    for i in range(0, n, per):
        chunk = tl.busy_ns[i : i + per]
        frac = sum(chunk) / (len(chunk) * tl.bucket_ns * tl.devices)
        busy.append(_BLOCKS[min(8, round(frac * 8))])
        mid = tl.start_ns + (i + len(chunk) / 2) * tl.bucket_ns
        mark = " "
        for name, ch in PHASE_MARKS:
            w = getattr(a.phases, name)
            if w.start_ns <= mid < w.end_ns:
                mark = ch
        marks.append(mark)
    return "".join(busy), "".join(marks), per


def _breakdown_line(b: IdleBreakdown) -> str:
    if b.idle_ns <= 0:
        return "the GPU was never idle in the steady state"
    share = b.shares()
    if b.host_on_cpu_ns is None:
        host = f"waiting on the host {pct(share['host'])} (no CPU samples to split it)"
    else:
        host = (
            f"waiting on the host {pct(share['host'] + share['other'])} (launching thread on "
            f"CPU {pct(share['host'])}, off CPU {pct(share['other'])}; {b.cpu_source})"
        )
    return f"{host}, synchronization {pct(share['sync'])}, launch gaps {pct(share['launch'])}"


def cpu_during_idle_line(a: Analysis) -> str:
    """ "During it the launching thread was in load_batch (data.py:42) 88 % of ..." """
    c = a.cpu_during_idle
    if c is None:
        return f"CPU during idle: not measured ({a.cpu_note or 'no CPU samples'})"
    who = f"the launching thread {c.thread} [{c.tid}] (pid {c.pid})"
    w = a.waits
    if w is not None and w.blocked and c.on_cpu_share is not None:
        where = (
            f"blocked at {w.wait_site.label()} ({w.offcpu_source} off-CPU samples)"
            if w.wait_site is not None
            else "off CPU, no stack (no off-CPU samples in this session)"
        )
        return (
            f"CPU during idle ({c.source}): {who} was off CPU "
            f"{pct(1 - c.on_cpu_share)} of the {seconds(c.idle_ns)} of idle stretches: "
            f"{where}; its {c.samples:,} on-CPU samples there name no code it waited in"
        )
    if not c.samples:
        return (
            f"CPU during idle ({c.source}): {who} had no samples during the idle stretches: "
            "it was off CPU (waiting on I/O, a lock, a queue or sleeping)"
        )
    where = (
        f"in {c.hot.frame.label()} {pct(c.hot.share)} of the time"
        if c.hot is not None
        else "in no single frame half of the time"
    )
    on = f", on CPU {pct(c.on_cpu_share)} of it" if c.on_cpu_share is not None else ""
    return (
        f"CPU during idle ({c.source}): during it {who} was {where} "
        f"({c.samples:,} samples over {c.stretches:,} idle stretches of {seconds(c.idle_ns)}{on})"
    )


def window_name(a: Analysis) -> str:
    """What the headline's window is: the steady state, or the active window of a workload
    with no steady loop."""
    return "the steady state" if a.phases.loop else "the active window after warm-up"


def idle_text(a: Analysis, width: int = 100) -> list[str]:
    """The GPU idle headline for the steady state, with each phase shown apart."""
    out = ["GPU idle (steady state)", "======================="]
    h = a.headline
    if h.ratio is None:
        out += _wrap(f"GPU idle: {figure_text(h)}", width, "")
        return [*out, ""]
    ph = a.phases
    out += _wrap(
        f"GPU idle {pct(h.ratio)} of {window_name(a)} ({seconds(ph.steady.duration_ns)}: "
        f"{ph.method}); idle = no kernel, copy or memset running on the device, over "
        f"{h.devices} GPU(s). Busy: kernels {pct(h.kernel_busy)}, copies {pct(h.copy_busy)} "
        "of the window (they may overlap)",
        width,
        "",
    )
    out.append(f"  {'phase':<10} {'from':>9} {'length':>9}  idle")
    s0 = ph.session.start_ns
    rows = [(PHASE_NAMES[n], getattr(ph, n), getattr(a.figures, n)) for n, _ in PHASE_MARKS]
    rows.append(("session", ph.session, a.figures.session))
    for name, w, fig in rows:
        if name == "steady" and not ph.loop:
            name = "analysed"
        mark = "  <- headline" if name in ("steady", "analysed") else ""
        out.append(
            f"  {name:<10} {seconds(w.start_ns - s0):>9} {seconds(w.duration_ns):>9}  "
            f"{figure_text(fig)}{mark}"
        )
    busy, marks, per = timeline_strip(a.timeline, a)
    if busy:
        out += [
            "",
            f"Timeline ({per * a.timeline.bucket_ns // 1_000_000} ms a cell; bar = GPU busy; "
            f"s start-up, w warm-up, = {'steady' if ph.loop else 'analysed'}, t tail)",
            f"  |{busy}|",
            f"  |{marks}|",
        ]
    if a.breakdown is not None:
        why = f"Why idle ({window_name(a)[4:]}): {_breakdown_line(a.breakdown)}"
        out += ["", *_wrap(why, width, "")]
    out += _wrap(cpu_during_idle_line(a), width, "")
    c = a.cpu_during_idle
    if c is not None and c.frames:
        out.append("  top frames during idle (inclusive share of samples):")
        out += [f"    {100 * f.share:5.1f} %  {f.frame.label()}" for f in c.frames]
    return [*out, ""]


def energy_text(report: Report) -> list[str]:
    """Energy and CO2e of the session with its arithmetic (Cloud Carbon Footprint method)."""
    if report.energy is None:
        return [report.energy_note, ""] if report.energy_note else []
    e = report.energy
    head = "== Energy and CO2e (Cloud Carbon Footprint method) =="
    total = (
        f"{e.facility_kwh:.6f} kWh, {e.co2e_g:.3f} g CO2e"
        if e.facility_kwh is not None and e.co2e_g is not None
        else f"{e.it_joules:.1f} J measured at the machine (no --cloud-provider/--region: "
        "no PUE or CO2e)"
    )
    return [head, total, *(f"  {line}" for line in explain(e)), ""]
