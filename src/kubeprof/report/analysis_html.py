"""The HTML findings panel: findings (each linking to its flame-graph frames), the GPU idle
headline with its phases, the 100 ms busy/idle timeline as an SVG, the idle breakdown and the
CPU frames during idle. Everything returned is escaped, ready to embed.

A link is ``<a class="kp-frame" data-view=".." data-search="..">``; flamegraph.js selects
that view and searches the frame label, so the matching frames light up in the graph.
"""

from __future__ import annotations

from html import escape

from kubeprof.analysis.findings import Analysis, Finding
from kubeprof.report.analysis_text import (
    PHASE_MARKS,
    PHASE_NAMES,
    cpu_during_idle_line,
    window_name,
)
from kubeprof.report.evidence import (
    Target,
    figure_text,
    number,
    number_name,
    pct,
    seconds,
    targets,
    title,
)
from kubeprof.report.units import percent

PHASE_COLOURS = {"startup": "#d6d6d6", "warmup": "#ffe082", "steady": "#90caf9", "tail": "#e1bee7"}
SVG_W, SVG_H, BAR_H = 1000, 92, 60
BUSY_COLOUR, IDLE_COLOUR = "#2e7d32", "#f2b8b0"  # GPU busy (a kernel running) / idle


def link(t: Target, text: str | None = None) -> str:
    e = escape
    return (
        f'<a href="#kp-canvas" class="kp-frame" data-view="{e(t.view)}" '
        f'data-search="{e(t.search)}" title="show in the {e(t.view.upper())} flame graph">'
        f"{e(text or t.search)}</a>"
    )


def finding_html(f: Finding) -> str:
    e = escape
    ev = f.evidence
    nums = "".join(
        f"<li>{e(number_name(k))}: <b>{e(number(k, v))}</b></li>" for k, v in ev.numbers.items()
    )
    links = " ".join(link(t) for t in targets(f))
    gain = (
        f'<p class="kp-gain">Estimated gain: <b>{e(seconds(f.gain.saved_ns))}</b> '
        f"({e(pct(f.gain.share))} of the analysed window). Model: {e(f.gain.model)}</p>"
        if f.gain is not None
        else '<p class="kp-gain">No gain estimate (no honest model for it).</p>'
    )
    frames = f'<p class="kp-links">Frames: {links}</p>' if links else ""
    return (
        f'<article class="kp-finding kp-{e(f.severity.value)}" data-kind="{e(f.kind.value)}">'
        f'<h3><span class="kp-sev">{e(f.severity.value)}</span> {e(title(f.kind))}</h3>'
        f"<p>{e(f.message)}</p>{frames}"
        f"<details><summary>Evidence</summary><ul>{nums}</ul>"
        + "".join(f"<div>{e(x)}</div>" for x in (*ev.frames, *ev.lines, *ev.kernels))
        + f"</details>{gain}</article>"
    )


def timeline_svg(a: Analysis) -> str:
    """Busy share per 100 ms bucket as bars over phase bands, with a seconds axis."""
    tl = a.timeline
    n = len(tl.busy_ns)
    if not n or not tl.devices:
        return ""
    span = n * tl.bucket_ns
    x = lambda ns: (ns - tl.start_ns) / span * SVG_W  # noqa: E731 - local scale
    parts = []
    for name, _ in PHASE_MARKS:
        w = getattr(a.phases, name)
        if w.duration_ns <= 0:
            continue
        x0, x1 = x(w.start_ns), x(w.end_ns)
        parts.append(
            f'<rect x="{x0:.1f}" y="0" width="{max(0.5, x1 - x0):.1f}" height="13" '
            f'fill="{PHASE_COLOURS[name]}" stroke="#fff"><title>{escape(PHASE_NAMES[name])}: '
            f"{escape(seconds(w.duration_ns))}</title></rect>"
        )
        if x1 - x0 > 40:
            parts.append(
                f'<text x="{x0 + 3:.1f}" y="10" font-size="10" fill="#222">'
                f"{escape(PHASE_NAMES[name])}</text>"
            )
    bw = SVG_W / n
    for i, busy in enumerate(tl.busy_ns):
        # Each bucket is a full-height column: idle (red) above busy (green), so a mostly
        # idle GPU reads as red at a glance instead of as a blank strip.
        frac = min(1.0, busy / (tl.bucket_ns * tl.devices))
        h = frac * BAR_H
        idle = tl.idle_ratio(i)
        tip = f"{seconds(i * tl.bucket_ns)}: busy {percent(frac, digits=0)}, idle {pct(idle)}"
        w = max(0.6, bw - 0.3)
        parts.append(
            f"<g><title>{escape(tip)}</title>"
            f'<rect x="{i * bw:.2f}" y="14" width="{w:.2f}" height="{BAR_H - h:.1f}" '
            f'fill="{IDLE_COLOUR}"/>'
            f'<rect x="{i * bw:.2f}" y="{14 + BAR_H - h:.1f}" width="{w:.2f}" '
            f'height="{h:.1f}" fill="{BUSY_COLOUR}"/></g>'
        )
    step = max(1, round(span / 1e9 / 10)) * 1_000_000_000
    for t in range(0, span + 1, step):
        parts.append(
            f'<text x="{x(tl.start_ns + t):.1f}" y="{BAR_H + 28}" font-size="10" '
            f'fill="#555">{t // 1_000_000_000} s</text>'
        )
    return (
        f'<svg class="kp-timeline" viewBox="0 0 {SVG_W} {SVG_H}" preserveAspectRatio="none" '
        f'width="100%" height="{SVG_H}" role="img" aria-label="GPU busy per 100 ms">'
        + "".join(parts)
        + "</svg>"
    )


def idle_html(a: Analysis) -> str:
    e = escape
    h = a.headline
    if h.ratio is None:
        return f'<p class="kp-headline">GPU idle: <b>{e(figure_text(h))}</b></p>'
    ph = a.phases
    rows = "".join(
        f"<tr><td>{e(PHASE_NAMES[n])}</td>"
        f"<td>{e(seconds(getattr(ph, n).start_ns - ph.session.start_ns))}</td>"
        f"<td>{e(seconds(getattr(ph, n).duration_ns))}</td>"
        f"<td>{e(figure_text(getattr(a.figures, n)))}</td></tr>"
        for n, _ in PHASE_MARKS
    )
    out = [
        f'<p class="kp-headline">GPU idle <b>{e(pct(h.ratio))}</b> of {e(window_name(a))} '
        f"({e(seconds(ph.steady.duration_ns))}: {e(ph.method)}); idle means no kernel, copy "
        f"or memset running on the device (busy: kernels {e(pct(h.kernel_busy))}, copies "
        f"{e(pct(h.copy_busy))}). Start-up, warm-up and tail are shown apart:</p>",
        f"<table><tr><th>phase</th><th>from</th><th>length</th><th>GPU idle</th></tr>{rows}"
        f"<tr><td>session</td><td>0.00 s</td><td>{e(seconds(ph.session.duration_ns))}</td>"
        f"<td>{e(figure_text(a.figures.session))}</td></tr></table>",
        "<h3>GPU busy per 100 ms</h3>"
        f'<p class="kp-key"><i style="background:{BUSY_COLOUR}"></i>busy '
        f'<i style="background:{IDLE_COLOUR}"></i>idle; the strip on top marks the phases</p>',
        timeline_svg(a),
    ]
    b = a.breakdown
    if b is not None and b.idle_ns > 0:
        share = b.shares()
        host = share.get("host", 0.0) + share.get("other", 0.0)
        split = (
            f" (launching thread on CPU {pct(share['host'])}, off CPU {pct(share['other'])})"
            if b.host_on_cpu_ns is not None
            else ""
        )
        out.append(
            f"<p>Why idle in the steady state: waiting on the host <b>{e(pct(host))}</b>"
            f"{e(split)}, synchronization <b>{e(pct(share['sync']))}</b>, "
            f"launch gaps <b>{e(pct(share['launch']))}</b>.</p>"
        )
    out.append(f"<p>{e(cpu_during_idle_line(a))}</p>")
    c = a.cpu_during_idle
    if c is not None and c.frames:
        items = "".join(
            f"<li>{e(percent(f.share))} {link(Target('cpu', f.frame.label()))}</li>"
            for f in c.frames
        )
        out.append(f'<ol class="kp-idle-frames">{items}</ol>')
    return "".join(out)


def findings_html(a: Analysis) -> str:
    """The panel on top of the page: findings, then the GPU idle headline and its backing."""
    if a.findings:
        body = "".join(finding_html(f) for f in a.findings)
    elif a.headline.ratio is None:
        body = f"<p>No findings: GPU idle is {escape(figure_text(a.headline))}.</p>"
    elif a.verdict:
        body = f"<p>{escape(a.verdict)}.</p>"
    else:
        body = "<p>No findings: nothing in this session matched a known problem.</p>"
    return (
        f'<div class="kp-findings">{body}</div>'
        f'<section class="kp-idle"><h2>GPU idle (steady state)</h2>{idle_html(a)}</section>'
    )
