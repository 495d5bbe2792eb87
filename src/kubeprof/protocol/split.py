"""Cut one collected batch into pieces the ingest accepts.

The ingest refuses a batch over its row or value limits (413), and the agent quarantines
what is refused. A launch-bound GPU workload can record more kernels in one poll than one
batch may hold, so the agent splits before spooling: nothing collected is refused for size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TypeVar

from kubeprof.model import Batch

# Well inside the ingest's defaults (50,000 rows, 4 M JSON values per batch): an estimate
# of values per row (fields + stack length) keeps a piece under `max_values` even for deep
# stacks, and the headroom covers the frame table each piece carries.
MAX_ROWS = 10_000
MAX_VALUES = 1_000_000
_FIELDS = 18  # values per row besides its stack (GpuActivity has the most, with tuples)

_T = TypeVar("_T")


def _cost(row: object) -> int:
    return _FIELDS + len(getattr(row, "stack", ()))


def _chunks(rows: Sequence[_T], max_rows: int, max_values: int) -> Iterator[tuple[_T, ...]]:
    start, values = 0, 0
    for i, row in enumerate(rows):
        c = _cost(row)
        if i > start and (i - start >= max_rows or values + c > max_values):
            yield tuple(rows[start:i])
            start, values = i, 0
        values += c
    if start < len(rows):
        yield tuple(rows[start:])


def split(batch: Batch, *, max_rows: int = MAX_ROWS, max_values: int = MAX_VALUES) -> list[Batch]:
    """`batch` as one or more batches, each within `max_rows`/`max_values`, in order.

    Processes and counters travel in the first piece (so a process is known before the
    samples and kernels that name it arrive); every record lands in exactly one piece."""
    rows = (
        len(batch.samples)
        + len(batch.processes)
        + len(batch.gpu_activities)
        + len(batch.gpu_metrics)
        + len(batch.gpu_tracers)
        + len(batch.offcpu_samples)
    )
    values = (
        sum(_cost(r) for r in batch.samples)
        + sum(_cost(r) for r in batch.gpu_activities)
        + sum(_cost(r) for r in batch.offcpu_samples)
    )
    if rows <= max_rows and values + _FIELDS * len(batch.gpu_metrics) <= max_values:
        return [batch]
    pieces: list[Batch] = [
        Batch(
            processes=batch.processes,
            counters=dict(batch.counters),
            gpu_tracers=batch.gpu_tracers,
        )
    ]
    for part in _chunks(batch.samples, max_rows, max_values):
        pieces.append(Batch(samples=part))
    for kernels in _chunks(batch.gpu_activities, max_rows, max_values):
        pieces.append(Batch(gpu_activities=kernels))
    for metrics in _chunks(batch.gpu_metrics, max_rows, max_values):
        pieces.append(Batch(gpu_metrics=metrics))
    for waits in _chunks(batch.offcpu_samples, max_rows, max_values):
        pieces.append(Batch(offcpu_samples=waits))
    # Fill the first piece rather than leaving it with processes only, where that fits.
    first, rest = pieces[0], pieces[1:]
    if (
        rest
        and len(first.processes) + len(first.gpu_tracers) + _rows(rest[0]) <= max_rows
        and _FIELDS * len(first.processes) + _values(rest[0]) <= max_values
    ):
        merged = replace(
            rest[0],
            processes=first.processes,
            counters=first.counters,
            gpu_tracers=first.gpu_tracers,
        )
        return [merged, *rest[1:]]
    return pieces


def _rows(b: Batch) -> int:
    return len(b.samples) + len(b.gpu_activities) + len(b.gpu_metrics) + len(b.offcpu_samples)


def _values(b: Batch) -> int:
    return sum(_cost(r) for r in (*b.samples, *b.gpu_activities, *b.gpu_metrics, *b.offcpu_samples))
