"""FairPool: sessions take turns, so one session's backlog cannot starve another's batch."""

import threading

import pytest

from kubeprof.operator.fairpool import FairPool


def test_a_small_job_of_another_key_overtakes_a_backlog():
    pool = FairPool(2)
    gates = [threading.Event() for _ in range(5)]
    started: list[str] = []
    lock = threading.Lock()

    def job(tag: str, gate: threading.Event | None = None):
        def run():
            with lock:
                started.append(tag)
            if gate is not None:
                gate.wait(10)
            return tag

        return run

    big = [pool.submit("big", job(f"big-{i}", gates[i])) for i in range(5)]
    while len(started) < 2:  # a lone session uses both workers
        threading.Event().wait(0.01)
    small = pool.submit("small", job("small"))
    gates[0].set()  # the first worker to free up takes the small job, not big-2
    assert small.result(timeout=5) == "small"
    assert started[:3] == ["big-0", "big-1", "small"]
    for g in gates:
        g.set()
    assert [f.result(timeout=5) for f in big] == [f"big-{i}" for i in range(5)]
    pool.shutdown()


def test_round_robin_between_keys_and_errors_reach_the_caller():
    pool = FairPool(1)
    gate, started = threading.Event(), threading.Event()
    order: list[str] = []
    first = pool.submit("a", lambda: (started.set(), gate.wait(10)))
    assert started.wait(5)
    futs = [
        pool.submit(k, (lambda k=k, i=i: order.append(f"{k}{i}")))
        for i in range(2)
        for k in ("a", "a", "b")
    ]
    gate.set()
    first.result(timeout=5)
    for f in futs:
        f.result(timeout=5)
    assert order == ["a0", "b0", "a0", "b1", "a1", "a1"]  # b never waits behind all of a

    def boom():
        raise ValueError("bad batch")

    with pytest.raises(ValueError, match="bad batch"):
        pool.submit("a", boom).result(timeout=5)
    assert pool.queued("a") == 0
    pool.shutdown()


def test_a_reserved_worker_starts_a_light_keys_job_while_three_backlogs_run():
    """Three keys with backlogs (three hostile sessions at full rate) get two of the three
    workers; a key with nothing running and one job waiting starts on the third at once,
    without waiting for any of their jobs to end."""
    pool = FairPool(3, per_key=2, reserve=1)
    gate = threading.Event()
    started: list[str] = []
    lock = threading.Lock()

    def job(tag: str, wait: bool):
        def run():
            with lock:
                started.append(tag)
            if wait:
                gate.wait(10)
            return tag

        return run

    with pool._cond:  # all queued before any worker looks (as after a burst of sends)
        heavy = [pool.submit(k, job(f"{k}{i}", True)) for i in range(3) for k in ("h1", "h2", "h3")]
    while len(started) < 2:
        threading.Event().wait(0.01)
    threading.Event().wait(0.2)  # the third worker stays idle: every waiting key has a backlog
    assert sorted(started) == ["h10", "h20"], started
    light = pool.submit("victim", job("victim", False))
    assert light.result(timeout=5) == "victim"  # while all of h1/h2/h3 are still blocked
    assert len(started) == 3 and not gate.is_set()
    gate.set()
    assert sorted(f.result(timeout=5) for f in heavy) == sorted(
        f"{k}{i}" for i in range(3) for k in ("h1", "h2", "h3")
    )
    with pytest.raises(ValueError, match="reserve must be 0 to 2"):
        FairPool(3, reserve=3)
    pool.shutdown()
