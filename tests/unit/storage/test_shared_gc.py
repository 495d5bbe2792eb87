"""Garbage collection of the shared stacks and frames on SQLite (PostgreSQL: the e2e
test_shared_gc_postgres runs the same scenarios)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubeprof.storage import Store, shared_gc
from tests.unit.storage import shared_gc_scenario as scenario


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(f"sqlite:///{tmp_path}/kp.db")
    yield s
    s.close()


def test_every_stack_reference_is_checked() -> None:
    refs = {f"{c.table.name}.{c.name}" for c in shared_gc.stack_references()}
    assert refs == {
        "samples.stack_id",
        "gpu_activities.stack_id",
        "stack_counts.stack_id",
        "offcpu_samples.stack_id",
    }


def test_shared_rows_follow_sessions(store: Store) -> None:
    scenario.shared_rows_follow_sessions(store)


def test_writer_in_flight_keeps_its_stack(store: Store) -> None:
    scenario.writer_in_flight_keeps_its_stack(store)
