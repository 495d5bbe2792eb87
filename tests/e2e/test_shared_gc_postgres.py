"""Garbage collection of the shared stacks and frames on a real PostgreSQL 15: the same
scenarios as the SQLite unit test, plus `kubeprof sessions rm` doing it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from kubeprof.session_removal import rm_command
from kubeprof.storage import Store
from tests.unit.storage import shared_gc_scenario as scenario

pytestmark = pytest.mark.e2e


@pytest.fixture
def store(postgres_dsn) -> Iterator[Store]:
    s = Store.open(postgres_dsn.url)
    with s.engine.begin() as conn:  # one database per module: start each test empty
        conn.execute(text("TRUNCATE sessions, stacks, frames CASCADE"))
    yield s
    s.close()


def test_shared_rows_follow_sessions(store: Store) -> None:
    scenario.shared_rows_follow_sessions(store)


def test_writer_in_flight_keeps_its_stack(store: Store) -> None:
    scenario.writer_in_flight_keeps_its_stack(store)


def test_sessions_rm_collects(store: Store, postgres_dsn, capsys) -> None:
    a = store.create_session("a")
    b = store.create_session("b")
    store.write_batch(a, scenario.BATCH_A)
    store.write_batch(b, scenario.BATCH_B)
    assert rm_command(["a"], None, postgres_dsn.url) == 0
    assert "deleted 3 stacks and 3 frames" in capsys.readouterr().err
    assert scenario.counts(store) == (2, 3)
    assert scenario.session_stacks(store, b) == {
        (scenario.MAIN, scenario.SHARED),
        (scenario.MAIN, scenario.B_CPU),
    }
