"""Stored report views (`storage.prepared_views`) on a real PostgreSQL: read back
byte-identical to the computed ones, recomputed when stale, gone with their session."""

from __future__ import annotations

import pytest

from tests.unit.storage import prepared_flames_scenario as flame_scenario
from tests.unit.storage import prepared_views_scenario as scenario

pytestmark = pytest.mark.e2e


@pytest.fixture
def url(postgres_dsn):
    """The module's database, emptied of sessions before each test."""
    from kubeprof.storage import Store
    from kubeprof.storage.models import SessionRow

    store = Store.open(postgres_dsn.url)
    with store.engine.begin() as conn:
        conn.execute(SessionRow.__table__.delete())
    store.close()
    return postgres_dsn.url


def test_a_loaded_view_renders_byte_identical_to_the_computed_one(url, tmp_path, monkeypatch):
    scenario.check_loaded_equals_computed(url, tmp_path, monkeypatch)


def test_a_changed_fingerprint_recomputes_and_replaces_the_view(url, monkeypatch):
    scenario.check_changed_fingerprint_recomputes(url, monkeypatch)


def test_a_running_session_is_never_stored(url):
    scenario.check_running_never_stored(url)


def test_deleting_a_session_removes_its_views(url):
    scenario.check_deleting_a_session_removes_its_views(url)


@pytest.mark.parametrize("check", flame_scenario.CHECKS, ids=flame_scenario.check_id)
def test_whole_session_flame_graphs_stored(check, url, monkeypatch):
    """`storage.prepared_flames` through the web UI's routes (each check says what)."""
    check(url, monkeypatch)
