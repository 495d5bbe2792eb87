"""Shared words for the two findings on a launcher that waits: where it blocked, and when."""

from __future__ import annotations

from kubeprof.analysis.findings.context import Context, pct
from kubeprof.analysis.findings.model import Evidence, Finding, Gain, Kind, Severity
from kubeprof.analysis.host_waits import HostWaits

MIN_IDLE = 0.25  # analysed-window idle share from which waiting is worth a finding
MIN_WAIT_SHARE = 0.5  # of the idle time, in long host-wait stretches


def long_wait(ctx: Context) -> tuple[float, int] | None:
    """(idle share, long-wait ns) when the GPU idles mostly in long host waits, else None."""
    idle = ctx.figures.steady.ratio
    if idle is None or idle < MIN_IDLE or ctx.waits is None:
        return None
    wait_ns = ctx.waits.wait_ns
    if not ctx.breakdown.idle_ns or wait_ns < MIN_WAIT_SHARE * ctx.breakdown.idle_ns:
        return None
    return idle, wait_ns


def wait_numbers(ctx: Context, w: HostWaits, idle: float, wait_ns: int) -> dict[str, float]:
    """The evidence numbers both waiting findings give (shares are of the analysed window)."""
    numbers: dict[str, float] = {
        "idle_share": idle,
        "waiting_share": wait_ns / ctx.steady_ns,
        "waits": w.stretches,
        "mean_wait_ms": wait_ns / max(1, w.stretches) / 1e6,
    }
    if w.on_cpu_share is not None:
        numbers["launcher_on_cpu_share"] = w.on_cpu_share
    return numbers


def where_blocked(w: HostWaits) -> str:
    """Where the thread waited: the off-CPU stack's line, or "off CPU, no stack"."""
    off = pct(1 - w.on_cpu_share) if w.on_cpu_share is not None else "most"
    if w.wait_site is not None:
        reason = f" in `{w.wait_reason}`" if w.wait_reason else ""
        return (
            f"the launching thread was off CPU {off} of that time, blocked{reason} at "
            f"`{w.wait_site.label()}` ({w.offcpu_source} off-CPU samples)"
        )
    return (
        f"the launching thread was off CPU {off} of that time (off CPU, no stack: this "
        "session has no off-CPU samples; record with the BPF sampler or py-spy idle "
        "sampling to see where it blocked)"
    )


def wait_finding(
    kind: Kind, message: str, evidence: Evidence, wait_ns: int, window: int, gain_words: str
) -> Finding:
    """The finding on a launcher that waits: CRITICAL when the waits hold half the analysed
    window or more, else WARNING; what is at stake is the time spent waiting."""
    severity = Severity.CRITICAL if wait_ns >= 0.5 * window else Severity.WARNING
    return Finding(kind, severity, message, evidence, Gain(wait_ns, wait_ns / window, gain_words))
