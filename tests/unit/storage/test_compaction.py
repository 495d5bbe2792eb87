"""Counting later on SQLite: readers answer the same before, during and after compaction,
and a compaction cut off half way counts nothing twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubeprof import reporting
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


def test_stale_sessions_cost_only_their_own_rows(store):
    scenario.check_stale_sessions_cost_their_own_rows(store)


def test_listing_sessions_counts_a_killed_recordings_samples_once(store, capsys):
    killed = store.create_session("killed", hz=99)  # never finished: its recorder died
    store.write_batch(killed, scenario.Batch(samples=(scenario._sample(0, 1),)))
    url = store.engine.url.render_as_string(hide_password=False)
    path = url.removeprefix("sqlite:///")
    assert reporting.sessions_command(f"sqlite:///file:{path}?mode=ro&uri=true") == 0
    assert scenario.counted_rows(store, killed) == 0  # a read-only store lists, counts later
    assert " killed " in capsys.readouterr().out
    assert reporting.sessions_command(url) == 0
    assert scenario.counted_rows(store, killed) == 1
    assert " killed " in capsys.readouterr().out
