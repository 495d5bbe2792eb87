"""CPU samples in columns: per-thread sorted timestamp and stack-id arrays plus a stack table.

Ten million samples as ``CpuSample`` objects would cost gigabytes and seconds to walk; as
columns a time window of one thread is two bisections, and counting its stacks is a C-level
``Counter`` over an array slice. Both CPU sources (the BPF sampler and the py-spy fallback)
produce ``CpuSample``; ``from_samples`` converts, storage can build the columns directly.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain

from kubeprof.model import CpuSample, Stack


@dataclass(frozen=True, slots=True)
class ThreadSamples:
    """The samples of one thread, sorted by time."""

    pid: int
    tid: int
    thread: str  # thread name (comm)
    ts_ns: Sequence[int]  # sorted CLOCK_MONOTONIC ns (an ``array('q')`` in practice)
    stack_ids: Sequence[int]  # index into SampleColumns.stacks, parallel to ts_ns

    def span(self, start_ns: int, end_ns: int, lo: int = 0) -> tuple[int, int]:
        """Index range [i, j) of the samples with start_ns <= ts < end_ns (search from ``lo``)."""
        i = bisect_left(self.ts_ns, start_ns, lo)
        return i, bisect_left(self.ts_ns, end_ns, i)

    def counts_in(self, stretches: Sequence[tuple[int, int]]) -> Counter[int]:
        """Samples per stack id inside the (sorted, disjoint) ``stretches`` (C-level
        counting over index ranges)."""
        ranges = []
        lo = 0
        for s, e in stretches:
            i, lo = self.span(s, e, lo)
            if lo > i:
                ranges.append((i, lo))
        ids = self.stack_ids
        return Counter(chain.from_iterable(ids[i:j] for i, j in ranges))


@dataclass(frozen=True, slots=True)
class SampleColumns:
    """All CPU samples of a session, grouped by thread."""

    threads: tuple[ThreadSamples, ...]
    stacks: Sequence[Stack]  # the stack table; root first, leaf last
    hz: float  # sampling rate per thread, so sample counts convert to on-CPU time
    source: str = "bpf"  # which sampler produced them ("bpf", "py-spy"); reports name it

    @property
    def period_ns(self) -> float:
        return 1e9 / self.hz if self.hz > 0 else 0.0

    def of_pids(self, pids: Iterable[int]) -> tuple[ThreadSamples, ...]:
        wanted = set(pids)
        return tuple(t for t in self.threads if t.pid in wanted)


def from_samples(samples: Iterable[CpuSample], hz: float, source: str = "bpf") -> SampleColumns:
    """Columns from sample objects (tests, small sessions); stacks are interned by value."""
    stack_ids: dict[Stack, int] = {}
    rows: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    names: dict[tuple[int, int], str] = {}
    for s in samples:
        sid = stack_ids.setdefault(s.stack, len(stack_ids))
        rows[(s.pid, s.tid)].append((s.ts_ns, sid))
        names[(s.pid, s.tid)] = s.thread
    threads = []
    for (pid, tid), pairs in sorted(rows.items()):
        pairs.sort()
        threads.append(
            ThreadSamples(
                pid,
                tid,
                names[(pid, tid)],
                array("q", (t for t, _ in pairs)),
                array("q", (i for _, i in pairs)),
            )
        )
    return SampleColumns(tuple(threads), tuple(stack_ids), hz, source)
