"""The collector driver: one poll loop from collectors to a sink, for every way kubeprof runs.

`kubeprof record` (sink: the local store) and the node agent (sink: the spool that the
shipper sends to the ingest API) differ only in their sink, their stop conditions and
what they do between passes; the loop is this one. Each pass polls every collector,
merges what they return into one batch and hands it to the sink. A collector that raises
is switched off and named in `notes`; the others go on. However the loop ends, every
collector is stopped and its last batch reaches the sink before the sink is closed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol, runtime_checkable

from kubeprof.model import Batch


@runtime_checkable
class Collector(Protocol):
    """A source of records: the CPU sampler, the GPU trace receiver, the NVML sampler."""

    def poll(self) -> Batch:
        """Records collected since the last call (never blocks for long)."""
        ...

    def stop(self) -> Batch:
        """Detach, and return everything still held; later calls return little or nothing."""
        ...


@runtime_checkable
class TargetedCollector(Collector, Protocol):
    """A collector that profiles chosen processes (the CPU sampler)."""

    def add_target(self, pid: int) -> None:
        """Profile `pid` (and its descendants) from now on."""
        ...


class Sink(Protocol):
    """Where batches go: the local store, or the node agent's spool and shipper."""

    def write(self, batch: Batch) -> None:
        """Take one batch (possibly empty: the sink decides what to keep)."""
        ...

    def close(self) -> None:
        """No more batches: make what was written durable (flush, ship, or set aside)."""
        ...


def merge(batches: Iterable[Batch]) -> Batch:
    """One batch holding all records of `batches`; counters are summed."""
    parts = list(batches)
    counters: dict[str, int] = {}
    for b in parts:
        for k, v in b.counters.items():
            counters[k] = counters.get(k, 0) + v
    return Batch(
        samples=tuple(s for b in parts for s in b.samples),
        processes=tuple(p for b in parts for p in b.processes),
        gpu_activities=tuple(a for b in parts for a in b.gpu_activities),
        gpu_metrics=tuple(m for b in parts for m in b.gpu_metrics),
        counters=counters,
        gpu_tracers=tuple(t for b in parts for t in b.gpu_tracers),
        offcpu_samples=tuple(w for b in parts for w in b.offcpu_samples),
    )


def is_empty(batch: Batch) -> bool:
    """True when the batch carries no record and no counter."""
    return not (
        batch.samples
        or batch.processes
        or batch.gpu_activities
        or batch.gpu_metrics
        or batch.counters
        or batch.gpu_tracers
        or batch.offcpu_samples
    )


class Driver:
    """Runs named collectors into one sink until a stop condition holds, then drains them."""

    def __init__(
        self,
        collectors: Mapping[str, Collector],
        sink: Sink,
        *,
        interval_s: float = 1.0,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.collectors = dict(collectors)
        self.sink = sink
        self.interval_s = interval_s  # seconds between passes, i.e. the batch cadence
        self.notes: list[str] = []  # one-line problems and the collectors' own notes
        self._log = log  # called with each note as it arises (`notes` keeps them all)
        self._active = dict(collectors)  # those still polled
        self._carry = Batch()  # what on_pass returned in a pass that then stopped
        self.closed = False  # drained and the sink closed

    def _note(self, text: str) -> None:
        self.notes.append(text)
        if self._log is not None:
            self._log(text)

    def attach(self, pid: int) -> dict[str, Exception]:
        """Give `pid` to every targeted collector; returns those that refused it, by name."""
        refused: dict[str, Exception] = {}
        for name, c in self._active.items():
            if isinstance(c, TargetedCollector):
                try:
                    c.add_target(pid)
                except Exception as exc:  # noqa: BLE001 - the PID may be gone; others go on
                    refused[name] = exc
        return refused

    def poll(self) -> Batch:
        """One pass over the collectors still running; a collector that raises is turned off."""
        parts = []
        for name, c in list(self._active.items()):
            try:
                parts.append(c.poll())
            except Exception as exc:  # noqa: BLE001 - one collector must not stop the rest
                del self._active[name]
                self._note(
                    f"collector {name} failed and is off for the rest of the run: "
                    f"{type(exc).__name__}: {exc}"
                )
        return merge(parts)

    def drain(self) -> Batch:
        """Stop every collector (failed ones too: they may hold data) and merge their last
        batches; the collectors' own notes (`warnings`, `messages`) join `notes`."""
        parts = []
        for name, c in self.collectors.items():
            try:
                parts.append(c.stop())
            except Exception as exc:  # noqa: BLE001 - keep the other collectors' data
                self._note(f"collector {name} failed while stopping: {exc}")
            for attr in ("warnings", "messages"):
                for m in getattr(c, attr, ()) or ():
                    self._note(str(m))
        self._active.clear()
        return merge(parts)

    def run(
        self,
        should_stop: Callable[[], bool],
        *,
        on_pass: Callable[[], Batch] | None = None,
        on_stop: Callable[[], None] | None = None,
        wait: Callable[[float], object] = time.sleep,
    ) -> None:
        """Poll into the sink until `should_stop()`, then drain and close the sink.

        Each pass: `on_pass()` (the node agent's rescan; its batch joins the pass's batch),
        `should_stop()`, one poll, `wait(interval_s)` (an `Event.wait`, so a signal ends
        the wait early). At the end, also when the loop raised: `on_stop()` (the recorder
        stops its command there, so the command's last GPU records are sent before the
        receiver is drained), then `close()`.
        """
        try:
            while True:
                if on_pass is not None:
                    self._carry = merge([self._carry, on_pass()])
                if should_stop():
                    break
                self.sink.write(merge([self._carry, self.poll()]))
                self._carry = Batch()
                wait(self.interval_s)
        finally:
            try:
                if on_stop is not None:
                    on_stop()
            finally:
                self.close()

    def close(self) -> None:
        """Drain every collector into the sink and close it; later calls do nothing.

        `run` ends with this; a caller that gives up before running the loop calls it so
        that collectors already started still stop and hand over what they hold.
        """
        if self.closed:
            return
        self.closed = True
        try:
            self.sink.write(merge([self._carry, self.drain()]))
        finally:
            self.sink.close()
