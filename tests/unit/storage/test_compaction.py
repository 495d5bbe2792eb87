"""Counting later on SQLite: readers answer the same before, during and after compaction,
and a compaction cut off half way counts nothing twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubeprof.storage import Store
from tests.unit.storage import compaction_scenario as scenario


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(f"sqlite:///{tmp_path}/kp.db")
    yield s
    s.close()


def test_readers_answer_the_same_before_during_and_after_compaction(store):
    scenario.check_none_half_full(store)


def test_a_compaction_cut_off_before_its_commit_counts_nothing_twice(store):
    scenario.check_crash_counts_nothing_twice(store)


def test_finishing_a_local_session_counts_its_samples(store):
    sid = scenario.write(store, "rec")
    assert scenario.counted_rows(store, sid) == 0
    store.finish_session(sid)
    assert scenario.counted_rows(store, sid) == scenario.SAMPLES


def test_a_session_left_uncounted_is_counted_when_the_store_is_next_opened(tmp_path):
    """A `kubeprof record` killed before its end leaves samples past the watermark; the
    next open of the local store counts them once, so session lists stop re-counting."""
    from kubeprof.storage import compaction

    url = f"sqlite:///{tmp_path}/kp.db"
    first = Store.open(url)
    sid = scenario.write(first, "killed")  # never finished
    first.close()
    again = Store.open(url)
    try:
        assert scenario.counted_rows(again, sid) == scenario.SAMPLES
        with again.engine.connect() as conn:
            assert compaction.uncounted(conn) == []
    finally:
        again.close()
