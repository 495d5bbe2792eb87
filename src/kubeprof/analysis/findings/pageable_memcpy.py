"""Copies from/to pageable host memory: staged through a bounce buffer, synchronous with the
host, and slower than from pinned memory. Names read ``memcpy HtoD (pageable)`` /
``(pinned)``; a name without the suffix is unknown and never counted as pageable."""

from __future__ import annotations

from collections import Counter, defaultdict

from kubeprof.analysis.findings.context import Context, ms, pct, user_frame, window_words
from kubeprof.analysis.findings.model import Evidence, Finding, Gain, Kind, Severity
from kubeprof.analysis.findings.stake import graded

MIN_SHARE = 0.02  # of the steady state spent in pageable copies
PINNED_SPEEDUP = 2.0  # assumed when the trace has no pinned copy of the same direction
MIN_MEASURED_BYTES = 1 << 20  # pinned copies this large give a bandwidth worth using


def _direction(name: str) -> str:
    parts = name.split()
    return parts[1] if len(parts) > 1 else "?"


def find(ctx: Context) -> Finding | None:
    if ctx.steady_ns <= 0:
        return None
    pageable: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # count, bytes, ns
    pinned: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # bytes, ns
    lines: Counter[str] = Counter()
    for c in ctx.trace.copies:
        if c.kind != "memcpy" or not ctx.in_steady(c):
            continue
        d = _direction(c.name)
        if c.name.endswith("(pageable)"):
            row = pageable[d]
            row[0] += 1
            row[1] += c.bytes
            row[2] += c.end_ns - c.start_ns
            f = user_frame(c.stack)
            if f is not None:
                lines[f"{f.file}:{f.line} {f.name}"] += 1
        elif c.name.endswith("(pinned)"):
            pinned[d][0] += c.bytes
            pinned[d][1] += c.end_ns - c.start_ns
    total_ns = sum(r[2] for r in pageable.values())
    if total_ns < MIN_SHARE * ctx.steady_ns:
        return None
    saved = 0.0
    models = []
    numbers: dict[str, float] = {"pageable_share": total_ns / ctx.steady_ns}
    for d, (n, nbytes, ns) in sorted(pageable.items()):
        bw = nbytes / ns if ns else 0.0  # bytes per ns = GB/s
        pb, pns = pinned.get(d, [0, 0])
        if pb >= MIN_MEASURED_BYTES and pns:
            pinned_bw, how = pb / pns, f"{d}: pinned bandwidth measured here ({pb / pns:.3g} GB/s)"
        else:
            pinned_bw, how = (
                bw * PINNED_SPEEDUP,
                f"{d}: pinned assumed {PINNED_SPEEDUP:g}x pageable",
            )
        models.append(how)
        saved += max(0.0, ns - nbytes / pinned_bw) if pinned_bw else 0.0
        numbers[f"{d}_copies"] = n
        numbers[f"{d}_bytes"] = nbytes
        numbers[f"{d}_gbps"] = bw
    dirs = ", ".join(f"{d} {pageable[d][0]} x" for d in sorted(pageable))
    if lines:
        top = lines.most_common(1)[0][0].split(" ")[0]
        dirs += f", at {top.rsplit('/', 1)[-1]}"
    message = (
        f"Pageable-memory copies take {pct(total_ns / ctx.steady_ns)} of {window_words(ctx)} "
        f"({dirs}, {ms(total_ns)}): allocate the host tensors pinned (pin_memory=True, "
        "tensor.pin_memory()) and copy with non_blocking=True so copies overlap compute."
    )
    return Finding(
        Kind.PAGEABLE_MEMCPY,
        graded(ctx, total_ns, 0.1, (Severity.WARNING, Severity.INFO)),
        message,
        Evidence(numbers=numbers, lines=tuple(line for line, _ in lines.most_common(5))),
        Gain(
            round(saved),
            saved / ctx.steady_ns,
            "copies run at pinned bandwidth (" + "; ".join(models) + "); overlap not counted",
        ),
    )
