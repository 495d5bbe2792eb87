"""The one poll loop: merge per pass, a failing collector isolated, everything drained at stop."""

from __future__ import annotations

import pytest

from kubeprof.agent.driver import Collector, Driver, TargetedCollector, is_empty, merge
from kubeprof.model import Batch, CpuSample

S = CpuSample(1, 1, 1, "t", 0, ())


class ListSink:
    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self.closed = 0

    def write(self, batch: Batch) -> None:
        assert not self.closed, "write after close"
        self.batches.append(batch)

    def close(self) -> None:
        self.closed += 1

    def samples(self) -> int:
        return sum(len(b.samples) for b in self.batches)


class Counting:
    """One sample per poll, one more at stop; optionally breaks on a given poll."""

    def __init__(self, fail_on: int | None = None, fail_stop: bool = False) -> None:
        self.polls, self.stops, self.fail_on, self.fail_stop = 0, 0, fail_on, fail_stop
        self.warnings = ["a note of its own"]

    def poll(self) -> Batch:
        self.polls += 1
        if self.polls == self.fail_on:
            raise OSError("perf buffer gone")
        return Batch(samples=(S,), counters={"n": 1})

    def stop(self) -> Batch:
        self.stops += 1
        if self.fail_stop:
            raise RuntimeError("detach failed")
        return Batch(samples=(S,))


class Targeted(Counting):
    def __init__(self, refuse: bool = False) -> None:
        super().__init__()
        self.targets: list[int] = []
        self.refuse = refuse

    def add_target(self, pid: int) -> None:
        if self.refuse:
            raise PermissionError(f"cannot trace {pid}")
        self.targets.append(pid)


def _passes(n: int):
    left = [n]

    def should_stop() -> bool:
        left[0] -= 1
        return left[0] < 0

    return should_stop


def test_protocols_are_structural():
    assert isinstance(Counting(), Collector) and not isinstance(Counting(), TargetedCollector)
    assert isinstance(Targeted(), TargetedCollector)


def test_each_pass_writes_one_merged_batch_then_drains_and_closes():
    a, b, sink = Counting(), Counting(), ListSink()
    Driver({"a": a, "b": b}, sink, interval_s=0).run(_passes(3), wait=lambda _s: None)
    assert (a.polls, b.polls, a.stops, b.stops) == (3, 3, 1, 1)
    assert len(sink.batches) == 4 and sink.closed == 1  # 3 passes + the drain
    assert sink.batches[0].counters == {"n": 2} and len(sink.batches[0].samples) == 2
    assert sink.samples() == 8


def test_failing_collector_is_switched_off_and_the_others_go_on():
    bad, good, sink, logged = Counting(fail_on=2), Counting(), ListSink(), []
    d = Driver({"bad": bad, "good": good}, sink, log=logged.append)
    d.run(_passes(4), wait=lambda _s: None)
    assert bad.polls == 2 and good.polls == 4
    assert bad.stops == 1  # still drained: it may hold data
    assert sink.samples() == 1 + 4 + 2  # bad's first poll, good's polls, both stops
    assert any("collector bad failed" in n and "perf buffer gone" in n for n in d.notes)
    assert logged == d.notes


def test_failure_while_stopping_keeps_the_rest_and_notes_it():
    sink = ListSink()
    d = Driver({"bad": Counting(fail_stop=True), "good": Counting()}, sink)
    d.run(lambda: True)
    assert sink.samples() == 1 and sink.closed == 1
    assert "collector bad failed while stopping: detach failed" in d.notes
    assert d.notes.count("a note of its own") == 2


def test_on_pass_batch_joins_the_pass_and_survives_a_stop():
    sink, stops = ListSink(), iter([False, True])
    hook = Batch(counters={"rescan": 1})
    Driver({"c": Counting()}, sink).run(
        lambda: next(stops), on_pass=lambda: hook, wait=lambda _s: None
    )
    assert [b.counters.get("rescan", 0) for b in sink.batches] == [1, 1]


def test_on_stop_runs_before_the_drain_even_when_the_loop_raises():
    order: list[str] = []

    class Watch(Counting):
        def stop(self) -> Batch:
            order.append("drain")
            return super().stop()

    sink = ListSink()

    def boom() -> bool:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Driver({"w": Watch()}, sink).run(boom, on_stop=lambda: order.append("on_stop"))
    assert order == ["on_stop", "drain"] and sink.samples() == 1 and sink.closed == 1


def test_close_is_idempotent_and_attach_reports_refusals():
    t_ok, t_no, plain, sink = Targeted(), Targeted(refuse=True), Counting(), ListSink()
    d = Driver({"ok": t_ok, "no": t_no, "plain": plain}, sink)
    refused = d.attach(42)
    assert t_ok.targets == [42] and list(refused) == ["no"]
    assert isinstance(refused["no"], PermissionError)
    d.close()
    d.close()
    d.run(lambda: True)
    assert sink.closed == 1 and t_ok.stops == 1


def test_merge_and_is_empty():
    m = merge([Batch(samples=(S,), counters={"a": 1}), Batch(counters={"a": 2, "b": 1})])
    assert len(m.samples) == 1 and m.counters == {"a": 3, "b": 1}
    assert is_empty(merge([])) and not is_empty(Batch(counters={"x": 0}))
