"""Text and HTML views of a GpuSummary (the HTML is a pre-escaped section to embed).

The idle figure shown first is the analysis' headline (``kubeprof.analysis.gpu_idle``): idle
over the steady state of the main loop (whole steps, after start-up and warm-up); when it
comes from NVML rather than CUPTI kernel spans, the text says so. Without kernel records no
idle or attribution figure is shown, only why (``off_reason``) and NVML's labelled fallback.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from html import escape

from kubeprof.analysis.gpu_idle import NVML, IdleFigure
from kubeprof.analysis.gpu_summary import GpuSummary
from kubeprof.report.units import in_unit, percent

_SHOWN_METRICS = (
    "gpu_util_pct",
    "sm_clock_mhz",
    "power_mw",
    "mem_used_bytes",
    "gpm_sm_active_pct",
    "gpm_tensor_active_pct",
    "gpm_dram_bw_pct",
)
_BLOCKS = " ▁▂▃▄▅▆▇█"


_ms = functools.partial(in_unit, unit="ms", digits=2, grouped=True)
_us = functools.partial(in_unit, unit="µs", digits=1, grouped=True)
_pct = percent


def _strip(values: tuple[float, ...], width: int = 60) -> str:
    if not values:
        return ""
    step = max(1, len(values) // width)
    cells = [
        sum(values[i : i + step]) / len(values[i : i + step]) for i in range(0, len(values), step)
    ]
    return "".join(_BLOCKS[min(8, round(v * 8))] for v in cells)


def _nvml_note(h: IdleFigure) -> str:
    return f"{_pct(h.ratio)} from NVML device utilisation (no CUPTI kernel spans recorded)"


STEADY = "steady state"  # the headline window: whole steps of the main loop (gpu_idle.window)


def _off_text(off_reason: str) -> str:
    reason = off_reason or "no CUDA kernel was recorded"
    if not reason.startswith("GPU tracing was off"):
        reason = f"GPU tracing was off: {reason}"
    return f"{reason}; no GPU idle or attribution figure without kernel records"


def _idle_line(s: GpuSummary, headline_shown: bool = False) -> str | None:
    """The headline GPU idle figure, labelled with the window or the NVML fallback; only
    the session figure where the findings analysis shows the headline already."""
    h = s.headline
    if h is not None and h.source == NVML:
        return f"GPU idle ratio (all GPUs): {_nvml_note(h)}"
    if h is None or not s.kernels:
        return None
    if headline_shown:
        return (
            f"GPU idle ratio (all GPUs): session {_pct(s.session.idle_ratio)} (the headline, "
            'over the analysed window, and its timeline are under "GPU idle" above)'
        )
    return (
        f"GPU idle ratio (all GPUs): session {_pct(s.session.idle_ratio)}, "
        f"{STEADY} {_pct(h.ratio)} "
        f"({_ms(s.active_end_ns - s.active_start_ns)} of whole steps of the main loop; "
        "start-up, warm-up and tail not counted)"
    )


def _idle_html(s: GpuSummary) -> str:
    h = s.headline
    if h is not None and h.source == NVML:
        return f"GPU idle ratio: <b>{escape(_nvml_note(h))}</b>."
    if h is None or not s.kernels:
        return ""
    return (
        f"GPU idle ratio: <b>{_pct(h.ratio)}</b> of the {STEADY} (whole steps of the main "
        f"loop), <b>{_pct(s.session.idle_ratio)}</b> of the whole session."
    )


def _no_forward(s: GpuSummary) -> str:
    """What unattributed kernel time is, when the receiver knows: backward kernels of
    autograd nodes made by an op that launched no kernel (a view), so no line to charge."""
    return (
        f"{_pct(s.unattributed_no_forward_ns / max(1, s.kernel_ns))} backward kernels of "
        "autograd nodes whose forward op launched no kernel (a view such as `unbind`, whose "
        "backward is a `cat`), shown as `[backward of an autograd node whose forward launch "
        "was not recorded]`"
    )


def _name(pid: int, names: Mapping[int, str] | None) -> str:
    name = (names or {}).get(pid, "")
    return f"{name} [{pid}]" if name and name != str(pid) else f"pid {pid}"


def render_gpu_text(
    s: GpuSummary,
    *,
    off_reason: str = "",
    names: Mapping[int, str] | None = None,
    headline_shown: bool = False,
) -> str:
    """Plain-text GPU section; without kernels, why (``off_reason``) instead of figures.
    ``headline_shown``: the findings analysis above shows the headline and its timeline,
    so this section gives the session figure and per-device figures without a second strip."""
    out = ["GPU", "==="]
    if not s.kernels:
        out.append(_off_text(off_reason))
    else:
        out.append(
            f"kernels: {s.kernels:,}  GPU kernel time: {_ms(s.kernel_ns)}  "
            f"attributed to a Python stack: {_pct(s.attributed_share)}"
        )
    if s.kernels and s.attributed_via_backward_ns:
        out.append(
            f"  of which {_pct(s.attributed_via_backward_ns / max(1, s.kernel_ns))} backward "
            "kernels charged to their forward op's line (`backward of ...`)"
        )
    if s.kernels and s.attributed_via_xla_ns:
        out.append(
            f"  of which {_pct(s.attributed_via_xla_ns / max(1, s.kernel_ns))} XLA kernels "
            "charged to the Python line of their JAX op (`[XLA ...]`, from the dumped HLO)"
        )
    if s.kernels and s.attributed_via_main_ns:
        out.append(
            f"  of which {_pct(s.attributed_via_main_ns / max(1, s.kernel_ns))} launched by "
            "native threads (autograd, XLA) and shown under the main thread's stack"
        )
    if s.kernels and s.unattributed_no_forward_ns:
        out.append(f"  not attributed: {_no_forward(s)}")
    idle = _idle_line(s, headline_shown)
    if idle is not None:
        out.append(idle)
    for dev, r in sorted(s.devices.items()) if s.kernels else ():
        act = s.devices_active.get(dev)
        strip = "" if headline_shown else f"  |{_strip(s.timeline.get(dev, ()))}|"
        out.append(
            f"  cuda:{dev}  idle {_pct(r.idle_ratio)} of session, "
            f"{_pct(act.idle_ratio) if act else '-'} of {STEADY}{strip}"
        )
    for pid, r in sorted(s.processes.items()) if s.kernels else ():
        act = s.processes_active.get(pid)
        out.append(
            f"  {_name(pid, names)}  idle {_pct(r.idle_ratio)} of session, "
            f"{_pct(act.idle_ratio) if act else '-'} of {STEADY} on {r.devices} GPU(s)"
        )
    if s.kernels or s.memcpy_ns or s.memset_ns or s.sync_ns or s.nvtx_ranges:
        out.append(
            f"memcpy: {_ms(s.memcpy_ns)} ({s.memcpy_bytes / 2**20:,.1f} MiB)  "
            f"memset: {_ms(s.memset_ns)}  "
            f"host waiting in sync calls: {_ms(s.sync_ns)}  NVTX ranges: {s.nvtx_ranges}"
        )
    if s.top_kernels:
        out += [
            "",
            "Top kernels by GPU time",
            f"{'total':>12} {'share':>7} {'count':>8} {'mean':>11}  grid / block  kernel",
        ]
        for k in s.top_kernels:
            out.append(
                f"{_ms(k.total_ns):>12} {_pct(k.share):>7} {k.count:>8,} {_us(k.mean_ns):>11}  "
                f"{k.grid}/{k.block}  {k.name}"
            )
    shown = [m for m in s.metrics if m.metric in _SHOWN_METRICS and m.pid == 0]
    if shown:
        out += ["", "NVML (device-wide)"]
        for m in shown:
            out.append(
                f"  cuda:{m.device} {m.metric:<22} mean {m.mean:>12,.1f}  "
                f"max {m.max:>12,.1f}  ({m.samples} samples)"
            )
    if s.counters:
        out += ["", "counters: " + ", ".join(f"{k}={v}" for k, v in sorted(s.counters.items()))]
    return "\n".join(out) + "\n"


def render_gpu_html(
    s: GpuSummary, *, off_reason: str = "", names: Mapping[int, str] | None = None
) -> str:
    """A self-contained, escaped ``<section>`` for the HTML report (its heading is the
    page's "GPU" section title); without kernels, why instead of figures."""
    e = escape
    if not s.kernels:
        return (
            f'<section class="kubeprof-gpu"><p>{e(_off_text(off_reason))}.</p>'
            f"<p>{_idle_html(s)}</p></section>"
        )
    rows = []
    for dev, r in sorted(s.devices.items()):
        act = s.devices_active.get(dev)
        bars = "".join(
            f'<span style="display:inline-block;width:4px;height:16px;background:'
            f'rgba(118,185,0,{max(0.05, v):.2f})" '
            f'title="{percent(v, digits=0, sign="%")} busy"></span>'
            for v in s.timeline.get(dev, ())
        )
        rows.append(
            f"<tr><td>cuda:{dev}</td><td>{_pct(r.idle_ratio)}</td>"
            f"<td>{_pct(act.idle_ratio) if act else '-'}</td><td>{bars}</td></tr>"
        )
    procs = "".join(
        f"<tr><td>{e(_name(pid, names))}</td><td>{_pct(r.idle_ratio)}</td>"
        f"<td>{_pct(s.processes_active[pid].idle_ratio) if pid in s.processes_active else '-'}</td>"
        f"<td>{r.devices}</td></tr>"
        for pid, r in sorted(s.processes.items())
    )
    kernels = "".join(
        f"<tr><td>{e(_ms(k.total_ns))}</td><td>{_pct(k.share)}</td><td>{k.count:,}</td>"
        f"<td>{e(_us(k.mean_ns))}</td><td>{e(str(k.grid))} / {e(str(k.block))}</td>"
        f'<td title="{e(k.demangled)}&#10;{e(k.raw)}">{e(k.name)}</td></tr>'
        for k in s.top_kernels
    )
    metrics = "".join(
        f"<tr><td>cuda:{m.device}</td><td>{e(m.metric)}</td><td>{m.mean:,.1f}</td><td>{m.max:,.1f}</td></tr>"
        for m in s.metrics
        if m.metric in _SHOWN_METRICS and m.pid == 0
    )
    return (
        '<section class="kubeprof-gpu">'
        f"<p>{s.kernels:,} kernels, {e(_ms(s.kernel_ns))} of GPU kernel time, "
        f"{_pct(s.attributed_share)} attributed to a Python stack"
        + (f" (not attributed: {e(_no_forward(s))})" if s.unattributed_no_forward_ns else "")
        + f". {_idle_html(s)}</p>"
        "<table><tr><th>device</th><th>idle (session)</th><th>idle (steady state)</th>"
        "<th>busy over the session</th></tr>"
        f"{''.join(rows)}</table>"
        "<table><tr><th>process</th><th>idle (session)</th><th>idle (steady state)</th>"
        "<th>GPUs</th></tr>"
        f"{procs}</table>"
        "<h3>Top kernels</h3><table><tr><th>total</th><th>share</th><th>count</th><th>mean</th>"
        f"<th>grid / block</th><th>kernel</th></tr>{kernels}</table>"
        + (
            f"<h3>NVML</h3><table><tr><th>device</th><th>metric</th><th>mean</th><th>max</th></tr>{metrics}</table>"
            if metrics
            else ""
        )
        + "</section>"
    )
