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
