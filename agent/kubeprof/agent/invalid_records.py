"""Find the records of a batch the store refused, so one bad value does not cost the rest.

`kubeprof record` writes straight to its store, without the ingest's checks. When a write
fails on a value (a number past its column, say) the whole batch's transaction is refused;
kept as it was, every later flush would be refused with it and the session would end with
no rows. The ingest's own rules (`protocol.codec`, the same bounds a cluster agent's batch
meets) tell which records are bad: halves of each record list are checked until the bad
records stand alone. Only reached after a refused write, so its cost does not matter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from kubeprof.model import Batch
from kubeprof.protocol import codec

# Batch fields that hold records, in the order they are checked.
_KEYS = ("samples", "processes", "gpu_activities", "gpu_metrics", "gpu_tracers", "offcpu_samples")


def _why(batch: Batch) -> str | None:
    """The ingest's refusal of ``batch`` (field named), or None when it would accept it."""
    try:
        codec.decode(codec.encode(batch, batch_id="check", node="local"))
    except codec.CodecError as exc:
        # a batch over the ingest's size limits is split on the wire, not refused here
        return None if exc.too_large else str(exc)
    return None


def _bad(key: str, recs: Sequence[Any], first: int, out: list[tuple[int, str]]) -> None:
    """Indexes (into the original list) and reasons of the records of ``recs`` the ingest
    refuses on their own."""
    kwargs: dict[str, Any] = {key: tuple(recs)}
    why = _why(Batch(**kwargs))
    if why is None:
        return
    if len(recs) == 1:
        out.append((first, f"{key}[{first}]: {why.replace(f'{key}[0]', f'{key}[{first}]')}"))
        return
    mid = len(recs) // 2
    _bad(key, recs[:mid], first, out)
    _bad(key, recs[mid:], first + mid, out)


def split(batch: Batch) -> tuple[Batch, list[str]]:
    """``batch`` without the records the ingest would refuse, and one line per refused
    record naming its field; the batch unchanged and [] when every record is valid."""
    if _why(batch) is None:
        return batch, []
    keep: dict[str, Any] = {}
    reasons: list[str] = []
    for key in _KEYS:
        recs: tuple[Any, ...] = getattr(batch, key)
        bad: list[tuple[int, str]] = []
        if recs:
            _bad(key, recs, 0, bad)
        if bad:
            drop = {i for i, _ in bad}
            keep[key] = tuple(r for i, r in enumerate(recs) if i not in drop)
            reasons += [why for _, why in bad]
    counters = _why(Batch(counters=batch.counters)) if not reasons else None
    if counters is not None:
        keep["counters"] = {}
        reasons.append(f"counters: {counters}")
    return dataclasses.replace(batch, **keep), reasons
