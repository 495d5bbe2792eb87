"""Copy-bound: host<->device copies take most of the device's busy time in the analysed
window, with or without kernels in the loop.

Pageable copies are staged through a bounce buffer and run well below the link; pinned ones
near it. The achieved bandwidth is set against pinned copies of the same direction measured
in this trace, else against PCIe x16 peaks. Must not fire: copies that are a small part of
the device time (a loop of big kernels with a small input copy).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from kubeprof.analysis.findings.context import Context, ms, pct, user_frame, window_words
from kubeprof.analysis.findings.model import Evidence, Finding, Gain, Kind, Severity

MIN_WINDOW_SHARE = 0.25  # copies busy at least this share of the window ...
MIN_BUSY_SHARE = 0.5  # ... and at least this share of the device's busy time
PINNED_SPEEDUP = 2.0  # pageable -> pinned, assumed when the trace measured no pinned copy
MIN_MEASURED_BYTES = 1 << 20
PCIE_PEAKS = "PCIe x16 peaks at ~32 GB/s (4.0) and ~63 GB/s (5.0) per direction"


def _direction(name: str) -> str:
    parts = name.split()
    return parts[1] if len(parts) > 1 else "?"


def find(ctx: Context) -> Finding | None:
    fig = ctx.figures.steady
    if fig.ratio is None or fig.copy_busy is None or fig.copy_busy_ns is None or not fig.busy_ns:
        return None
    if fig.copy_busy < MIN_WINDOW_SHARE or fig.copy_busy_ns < MIN_BUSY_SHARE * fig.busy_ns:
        return None
    # per direction: [count, bytes, ns, pageable ns, pageable bytes]; pinned [bytes, ns]
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    pinned: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    lines: Counter[str] = Counter()
    for c in ctx.trace.copies:
        if c.kind != "memcpy" or not ctx.in_steady(c) or c.end_ns <= c.start_ns:
            continue
        d = _direction(c.name)
        r = rows[d]
        ns = c.end_ns - c.start_ns
        r[0] += 1
        r[1] += c.bytes
        r[2] += ns
        if c.name.endswith("(pageable)"):
            r[3] += ns
            r[4] += c.bytes
        elif c.name.endswith("(pinned)"):
            pinned[d][0] += c.bytes
            pinned[d][1] += ns
        if (f := user_frame(c.stack)) is not None:
            lines[f"{f.file}:{f.line} {f.name}"] += ns
    if not rows:
        return None
    window = ctx.steady_ns
    numbers: dict[str, float] = {
        "copy_busy_share": fig.copy_busy,
        "kernel_busy_share": fig.kernel_busy or 0.0,
    }
    parts, models = [], []
    saved = 0.0
    for d, (n, nbytes, ns, pg_ns, pg_bytes) in sorted(rows.items(), key=lambda kv: -kv[1][2]):
        gbps = nbytes / ns if ns else 0.0
        numbers[f"{d}_copies"] = n
        numbers[f"{d}_bytes"] = nbytes
        numbers[f"{d}_gbps"] = gbps
        pb, pns = pinned.get(d, [0, 0])
        kind = "pageable" if pg_ns >= ns / 2 else "pinned" if pb else "unknown memory"
        ref = (
            f"pinned copies here reach {pb / pns:.3g} GB/s"
            if pb >= MIN_MEASURED_BYTES and pns
            else PCIE_PEAKS
        )
        parts.append(
            f"{d} {n:,} x {nbytes / max(1, n) / 2**20:.3g} MiB from {kind} memory at "
            f"{gbps:.3g} GB/s ({ref})"
        )
        if pg_ns:
            pg_bw = pg_bytes / pg_ns
            if pb >= MIN_MEASURED_BYTES and pns:
                target, how = pb / pns, f"{d}: pinned bandwidth measured here"
            else:
                target, how = pg_bw * PINNED_SPEEDUP, f"{d}: pinned assumed {PINNED_SPEEDUP:g}x"
            saved += max(0.0, pg_ns - pg_bytes / target) if target else 0.0
            models.append(how)
    where = ""
    if lines:
        top = lines.most_common(1)[0][0].split(" ")[0]
        where = f" at {top.rsplit('/', 1)[-1]}"
    advice = (
        "allocate the host buffers pinned (pin_memory=True, tensor.pin_memory()) and copy "
        "with non_blocking=True so copies overlap compute; move fewer bytes (keep data on the "
        "GPU, smaller dtypes)"
    )
    message = (
        f"Copy-bound: copies keep the device busy {pct(fig.copy_busy)} of {window_words(ctx)} "
        f"(kernels {pct(fig.kernel_busy or 0.0)}): {'; '.join(parts)}{where}, "
        f"{ms(sum(r[2] for r in rows.values()))} in all. To speed it up, {advice}."
    )
    gain = None
    if saved > 0:
        gain = Gain(
            round(saved),
            saved / window,
            "pageable copies run at pinned bandwidth (" + "; ".join(models) + "); "
            "overlap with compute not counted",
        )
    return Finding(
        Kind.COPY_BOUND,
        Severity.CRITICAL if fig.copy_busy >= 0.5 else Severity.WARNING,
        message,
        Evidence(numbers=numbers, lines=tuple(line for line, _ in lines.most_common(3))),
        gain,
    )
