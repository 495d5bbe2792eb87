"""Stored report views on SQLite (`storage.prepared_views`): read back byte-identical, and
never shown when the code, the session or its status says they may be stale."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from kubeprof import reporting
from kubeprof.operator import view_fill
from kubeprof.storage import Store
from kubeprof.storage import queries as q
from kubeprof.storage.models import PreparedViewRow
from kubeprof.ui.routes import Routes
from tests.unit.report.truth_store import store_fixture
from tests.unit.storage import prepared_flames_scenario as flame_scenario
from tests.unit.storage import prepared_views_scenario as scenario


def _url(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/views.db"


def test_a_loaded_view_renders_byte_identical_to_the_computed_one(tmp_path, monkeypatch):
    scenario.check_loaded_equals_computed(_url(tmp_path), tmp_path, monkeypatch)


def test_a_changed_fingerprint_recomputes_and_replaces_the_view(tmp_path, monkeypatch):
    scenario.check_changed_fingerprint_recomputes(_url(tmp_path), monkeypatch)


def test_a_running_session_is_never_stored(tmp_path):
    scenario.check_running_never_stored(_url(tmp_path))


def test_deleting_a_session_removes_its_views(tmp_path):
    scenario.check_deleting_a_session_removes_its_views(_url(tmp_path))


def test_a_session_reopened_and_finished_again_is_recomputed(tmp_path, monkeypatch):
    """More records after a reopening: the view stored at the first end no longer matches
    (its seal has the old end), the new one holds the new sample."""
    url = _url(tmp_path)
    store_fixture(url, "copyonly")
    before = reporting.load(url, "copyonly", whole_session=True)
    store_fixture(url, "compute")  # another session: copyonly's view still holds
    with monkeypatch.context() as m:
        scenario.never_computed(m)
        assert reporting.load(url, "copyonly", whole_session=True) == before
    store = Store.open(url)
    try:
        sid = scenario.reopen_with_a_late_sample(store, "copyonly")
        store.finish_session(sid)
    finally:
        store.close()
    after = reporting.load(url, "copyonly", whole_session=True)
    assert sum(ws.samples for ws in after.profile.cpu) == (
        sum(ws.samples for ws in before.profile.cpu) + 1
    )


def test_a_row_that_does_not_decode_is_ignored(tmp_path):
    """A damaged (or foreign) body is never trusted: the view is computed again."""
    url = _url(tmp_path)
    store_fixture(url, "copyonly")
    computed = reporting.load(url, "copyonly")
    store = Store.open(url)
    try:
        with store.engine.begin() as conn:
            conn.execute(update(PreparedViewRow).values(body=b"\x92\x01not a report"))
    finally:
        store.close()
    assert reporting.load(url, "copyonly") == computed


def test_the_operator_fills_a_completed_sessions_view(tmp_path, monkeypatch):
    """After aggregation the operator stores the report's and the web UI page's views;
    the reader then computes nothing. A running session is left alone."""
    url = _url(tmp_path)
    store_fixture(url, "serve")
    store = Store.open(url)
    try:
        with store.engine.connect() as conn:
            sid = q.find_session(conn, "serve").id
        view_fill.note(store.engine, sid)
        assert view_fill.wait(60)
        fp = scenario.prepared_views.fingerprint()
        assert scenario.rows(url) == [
            ("serve", "keep_interpreter=0,whole=0", fp),
            ("serve", "keep_interpreter=0,whole=1", fp),
        ]
        running = store.create_session("live", hz=99)
        assert view_fill.fill(store.engine, running) is False
    finally:
        store.close()
    fresh = f"sqlite:///{tmp_path}/fresh.db"  # the same session, its views computed
    store_fixture(fresh, "serve")
    computed = [reporting.load(fresh, "serve", whole_session=w) for w in (False, True)]
    scenario.never_computed(monkeypatch)
    assert [reporting.load(url, "serve", whole_session=w) for w in (False, True)] == computed
    assert computed[0] != computed[1]  # the GPU window's CPU view is not the whole session's
    # the web UI (its session list has no row counts) reads the same stored views
    for query in ({}, {"whole-session": "1"}):
        resp = Routes(Store.open(url).engine).handle("GET", "/api/v1/sessions/local/serve", query)
        assert resp.status == 200, resp.body[:300]


@pytest.mark.parametrize("check", flame_scenario.CHECKS, ids=flame_scenario.check_id)
def test_whole_session_flame_graphs_stored(check, tmp_path, monkeypatch):
    """`storage.prepared_flames` through the web UI's routes (each check says what)."""
    check(_url(tmp_path), monkeypatch)
