"""How far in time one node's records may reach: the session's length, whatever they claim.

Timestamps are each node's CLOCK_MONOTONIC nanoseconds, so the session's window is known
in a node's clock only through that node's other records: everything one node sends for a
session must fit in one span no longer than the session may last (its duration, the drain
after it, and a stated clock skew). A record outside it is refused with the field it came
in, before anything is stored. Aggregation and views then cost what the stored rows cost,
never what a claimed span would (a kernel "running" for 115 days, or for 2^63-1 ns).

Pure functions over a decoded `Batch`; the ingest keeps each node's extent between batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kubeprof.field_error import FieldError
from kubeprof.model import Batch

# The longest session the CRD allows (spec.duration "between 1s and 24h"): the span used
# when a session's own end is not known yet.
MAX_SESSION_S = 24 * 3600
NS_PER_S = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Extent:
    """The earliest and latest timestamp of one node's records of one session (ns)."""

    lo: int
    hi: int


class OutOfBounds(FieldError):
    """A record claims a time outside what the session allows; the message names it."""


def max_span_ns(duration_s: float | None, slack_s: float) -> int:
    """The longest span one node's records may cover: the session's duration (the CRD's
    maximum when unknown) plus `slack_s` (drain after the end, clock skew)."""
    d = duration_s if duration_s is not None and duration_s > 0 else MAX_SESSION_S
    return int((min(d, MAX_SESSION_S) + max(slack_s, 0.0)) * NS_PER_S)


def human(ns: int) -> str:
    """A span as people read it: 1.5 s, 42 min, 115.0 days."""
    s = ns / NS_PER_S
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 3 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def _spans(batch: Batch) -> Iterator[tuple[str, int, int]]:
    """(field, first ns, last ns) of every record that lasts, in wire order."""
    for i, a in enumerate(batch.gpu_activities):
        yield f"gpu_activities[{i}].end_ns", a.start_ns, a.end_ns
    for i, w in enumerate(batch.offcpu_samples):
        yield f"offcpu_samples[{i}].blocked_ns", w.ts_ns, w.ts_ns + w.blocked_ns


def _times(batch: Batch) -> Iterator[tuple[str, int, int]]:
    """(field, first ns, last ns) of every timed record, in wire order."""
    for i, s in enumerate(batch.samples):
        yield f"samples[{i}].ts_ns", s.ts_ns, s.ts_ns
    yield from _spans(batch)
    for i, m in enumerate(batch.gpu_metrics):
        yield f"gpu_metrics[{i}].ts_ns", m.ts_ns, m.ts_ns


def _extent(batch: Batch) -> Extent | None:
    waits = batch.offcpu_samples
    los = [s.ts_ns for s in batch.samples]
    los += [a.start_ns for a in batch.gpu_activities]
    los += [m.ts_ns for m in batch.gpu_metrics]
    los += [w.ts_ns for w in waits]
    if not los:
        return None
    his = [a.end_ns for a in batch.gpu_activities]
    his += [w.ts_ns + w.blocked_ns for w in waits]
    return Extent(min(los), max(max(los), max(his, default=0)))


def check(batch: Batch, limit_ns: int, seen: Extent | None = None) -> Extent | None:
    """The node's extent once `batch` is added to `seen`; OutOfBounds naming the first
    record that would stretch it past `limit_ns` (nothing is added then).

    A record that stays within an extent already stored is never refused, so data kept
    from before these bounds cannot block a node's later batches."""
    for path, t0, t1 in _spans(batch):
        if t1 - t0 > limit_ns:
            raise OutOfBounds(
                path,
                f"a span of {human(t1 - t0)}; no record may last longer than the session "
                f"allows ({human(limit_ns)}: its duration, the drain after it and the clock "
                "skew)",
            )
    mine = _extent(batch)
    if mine is None:
        return seen
    lo = mine.lo if seen is None else min(seen.lo, mine.lo)
    hi = mine.hi if seen is None else max(seen.hi, mine.hi)
    if hi - lo <= limit_ns or (seen is not None and lo == seen.lo and hi == seen.hi):
        return Extent(lo, hi)
    # Too wide: walk the records in order to name the first one that makes it so.
    cur = seen
    for path, t0, t1 in _times(batch):
        nlo, nhi = (t0, t1) if cur is None else (min(cur.lo, t0), max(cur.hi, t1))
        widened = cur is None or nlo < cur.lo or nhi > cur.hi
        if widened and nhi - nlo > limit_ns:
            raise OutOfBounds(
                path,
                f"{t0 if nlo == t0 else t1} ns lies {human(nhi - nlo)} from this node's "
                f"other records of the session; all must fit in {human(limit_ns)} (the "
                "session's duration, the drain after it and the clock skew): timestamps "
                "are the node's CLOCK_MONOTONIC nanoseconds",
            )
        cur = Extent(nlo, nhi)
    return cur
