"""Counting later on a real PostgreSQL: readers answer the same before, during and after
compaction; a compaction whose backend is killed between its counts and its watermark
counts nothing twice; two compactions at once, while batches arrive, count each sample
once; the operator's batch writer counts in the background and before aggregation."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

from kubeprof.model import Batch, CpuSample
from kubeprof.storage import Store, compaction
from tests.unit.storage import compaction_scenario as scenario

pytestmark = pytest.mark.e2e


@pytest.fixture
def store(postgres_dsn):
    s = Store.open(postgres_dsn.url)
    with s.engine.begin() as conn:  # one module database: each test starts from no sessions
        conn.execute(text("DELETE FROM sessions"))
    yield s
    s.close()


def test_readers_answer_the_same_before_during_and_after_compaction(store):
    scenario.check_none_half_full(store)


def test_a_compaction_whose_backend_is_killed_counts_nothing_twice(store):
    def kill(conn) -> None:
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        with store.engine.connect() as other:
            assert other.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})").scalar()
        conn.exec_driver_sql("SELECT 1")  # the killed backend fails its next statement

    scenario.check_crash_counts_nothing_twice(store, kill=kill)


def test_two_compactions_at_once_while_batches_arrive_count_each_sample_once(store):
    sid = store.create_session("busy", hz=99)
    stop = threading.Event()
    errors: list[BaseException] = []
    written = [0]

    def writer() -> None:
        s = Store.open(store.engine.url.render_as_string(hide_password=False))
        try:
            for round_ in range(40):
                samples = tuple(
                    CpuSample(round_ * 10**8 + i, 7, 70 + i % 4, "w", 0, scenario.STACKS[i % 5])
                    for i in range(50)
                )
                s.write_batch(sid, Batch(samples=samples), node="node-0")
                written[0] += 50
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            s.close()

    def compactor() -> None:
        try:
            while not stop.is_set():
                compaction.compact(store.engine, sid, chunk=37)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    writers = [threading.Thread(target=writer) for _ in range(2)]
    compactors = [threading.Thread(target=compactor) for _ in range(2)]
    for t in writers + compactors:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in compactors:
        t.join()
    assert not errors
    compaction.compact(store.engine, sid)
    assert scenario.sample_rows(store, sid) == written[0] == 2 * 40 * 50
    assert scenario.counted_rows(store, sid) == written[0]


def test_a_batch_committing_after_a_later_one_is_not_skipped(store):
    """Sample ids are taken at insert, not at commit: a compaction that ran while an
    earlier batch was still open must neither skip its lower ids nor count them twice."""
    from kubeprof.storage.intern import Interner
    from kubeprof.storage.store import write_batch

    sid = store.create_session("late", hz=99)
    interner = Interner()
    with store.engine.begin() as conn:  # interned and committed first: the open batch
        interner.stack_ids_for(conn, scenario.STACKS)  # must not hold a frame row lock
    early = Batch(samples=tuple(CpuSample(i, 7, 7, "w", 0, scenario.STACKS[0]) for i in range(20)))
    late = Batch(samples=tuple(CpuSample(i, 8, 8, "w", 0, scenario.STACKS[1]) for i in range(30)))
    with store.engine.connect() as conn:
        tx = conn.begin()
        write_batch(conn, interner, sid, early)  # its ids taken, not committed
        store.write_batch(sid, late)  # higher ids, committed first
        counted: list[int] = []
        t = threading.Thread(target=lambda: counted.append(compaction.compact(store.engine, sid)))
        t.start()
        t.join(timeout=2)  # it waits for the open batch (or, without that, ran past it)
        tx.commit()
    t.join()
    compaction.compact(store.engine, sid)
    assert scenario.sample_rows(store, sid) == 50
    assert scenario.counted_rows(store, sid) == 50


def test_the_operator_counts_in_the_background(store):
    from kubeprof.operator.db import BatchWriter

    sid = store.create_session("op", hz=99)
    w = BatchWriter(store.engine, compact_every_s=0.05)
    samples = tuple(CpuSample(i, 7, 7, "w", 0, scenario.STACKS[i % 5]) for i in range(30))
    assert not w.store(sid, "b1", "node-0", Batch(samples=samples)).duplicate
    deadline = time.monotonic() + 30
    while scenario.counted_rows(store, sid) < 30 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert scenario.counted_rows(store, sid) == 30


def test_stale_sessions_cost_only_their_own_rows(store):
    work = scenario.check_stale_sessions_cost_their_own_rows(store)
    # Three reads of the totals, each fetching the killed session's 60 uncounted samples
    # and no other sample row; none once they are counted.
    assert work["before"] == work["after"] == 3 * 60, work
    assert work["settled"] == 0, work


def test_stack_counts_come_in_one_order_whatever_the_plan(store):
    """The rows' order reaches the flame graph's bytes (a stored graph is compared with one
    built again); it was the plan's, and an ANALYZE between two reads changed it."""
    from kubeprof.storage import queries as q
    from kubeprof.storage import stack_counts as sc
    from tests.unit.report.truth_store import store_fixture

    store_fixture(str(store.engine.url.render_as_string(hide_password=False)), "compute")
    with store.engine.connect() as conn:
        sid = q.find_session(conn, "compute").id
        before = sc.stack_counts(conn, sid)
    with store.engine.begin() as conn:
        conn.execute(text("ANALYZE"))
    with store.engine.connect() as conn:
        after = sc.stack_counts(conn, sid)
    assert len(before) > 100 and sorted(before) == sorted(after)
    assert before == after
