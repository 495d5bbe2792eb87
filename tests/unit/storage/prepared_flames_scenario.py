"""Stored whole-session flame graphs (`storage.prepared_flames`) against the ones built
from `stack_counts` and the records: shared by the SQLite tests and the PostgreSQL e2e
tests. Every answer goes through the web UI's routes, as the page asks for it."""

from __future__ import annotations

import pytest
from sqlalchemy import Executable, delete, func, select, update

from kubeprof.operator import view_fill
from kubeprof.storage import Store
from kubeprof.storage import queries as q
from kubeprof.storage.models import PreparedFlameRow, SessionRow
from kubeprof.ui import flames
from kubeprof.ui.routes import Routes
from tests.unit.report.truth_store import store_fixture
from tests.unit.storage.prepared_views_scenario import FIXTURES, reopen_with_a_late_sample

VIEWS = ("cpu", "gpu", "off-cpu", "wall")
KEEP = ("0", "1")


def flame(url: str, name: str, **query: str) -> bytes:
    """The flame graph's answer, as the UI sends it."""
    store = Store.open(url)
    try:
        resp = Routes(store.engine).handle(
            "GET", f"/api/v1/sessions/local/{name}/flamegraph", query
        )
    finally:
        store.close()
    assert resp.status == 200, resp.body[:300]
    return resp.body


def summary(url: str, name: str, **query: str) -> None:
    store = Store.open(url)
    try:
        resp = Routes(store.engine).handle("GET", f"/api/v1/sessions/local/{name}", query)
    finally:
        store.close()
    assert resp.status == 200, resp.body[:300]


def flame_rows(url: str) -> list[tuple[str, str]]:
    """(session name, key) of every stored flame graph."""
    store = Store.open(url)
    try:
        with store.engine.connect() as conn:
            query = select(SessionRow.name, PreparedFlameRow.options).join(
                SessionRow, SessionRow.id == PreparedFlameRow.session_id
            )
            return sorted(tuple(r) for r in conn.execute(query))
    finally:
        store.close()


def execute(url: str, statement: Executable) -> None:
    """Run one statement in its own transaction."""
    store = Store.open(url)
    try:
        with store.engine.begin() as conn:
            conn.execute(statement)
    finally:
        store.close()


def never_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, a flame graph built from the store fails the test (it must be read)."""

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("built, not read back")

    monkeypatch.setattr(flames, "view_stacks", boom)


def whole_graphs(url: str) -> dict[tuple[str, str, str], bytes]:
    """Every fixture's whole-session graph per view and keep-interpreter flag."""
    return {
        (name, view, keep): flame(url, name, view=view, **{"keep-interpreter": keep})
        for name in FIXTURES
        for view in VIEWS
        for keep in KEEP
    }


def check_stored_equals_built(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first answer (built, then stored), the one stored with the page's view (the
    summary's `load_report`) and the one the operator's fill stores are byte-identical to
    what is built from the store; read back, nothing is built."""
    for name in FIXTURES:
        store_fixture(url, name)
    built = whole_graphs(url)
    keys = [f"view={v},keep_interpreter={k}" for v in VIEWS for k in KEEP]
    assert flame_rows(url) == sorted((n, k) for n in FIXTURES for k in keys)
    with monkeypatch.context() as m:
        never_built(m)
        assert whole_graphs(url) == built
    # the CPU graph stored beside the page's whole-session view, by the summary
    execute(url, delete(PreparedFlameRow))
    for name in FIXTURES:
        for keep in KEEP:
            summary(url, name, **{"whole-session": "1", "keep-interpreter": keep})
    assert flame_rows(url) == sorted(
        (n, f"view=cpu,keep_interpreter={k}") for n in FIXTURES for k in KEEP
    )
    with monkeypatch.context() as m:
        never_built(m)
        for name in FIXTURES:
            for keep in KEEP:
                got = flame(url, name, view="cpu", **{"keep-interpreter": keep})
                assert got == built[name, "cpu", keep], (name, keep)
    # ... and by the operator's fill
    execute(url, delete(PreparedFlameRow))
    store = Store.open(url)
    try:
        with store.engine.connect() as conn:
            ids = [q.find_session(conn, name).id for name in FIXTURES]
        assert all(view_fill.fill(store.engine, sid) for sid in ids)
    finally:
        store.close()
    assert flame_rows(url) == sorted((n, "view=cpu,keep_interpreter=0") for n in FIXTURES)
    with monkeypatch.context() as m:
        never_built(m)
        for name in FIXTURES:
            assert flame(url, name, view="cpu") == built[name, "cpu", "0"], name


def check_narrowed_graphs_are_built(url: str, _m: pytest.MonkeyPatch) -> None:
    """A graph narrowed by time, pod or GPU is built every time, never read from the
    stored whole-session one nor stored; a damaged stored body is ignored."""
    store_fixture(url, "serve")
    narrowed = ({"from": "0.5"}, {"to": "2"}, {"gpu": "0"}, {"pod": "nobody"})
    first = [flame(url, "serve", view="cpu", **query) for query in narrowed]
    assert flame_rows(url) == []
    whole = flame(url, "serve", view="cpu")
    assert flame_rows(url) == [("serve", "view=cpu,keep_interpreter=0")]
    planted = b'{"initial":"cpu","planted":1}'  # what a narrowed graph must never show
    execute(url, update(PreparedFlameRow).values(body=planted))
    assert flame(url, "serve", view="cpu") == planted
    assert [flame(url, "serve", view="cpu", **query) for query in narrowed] == first
    assert flame_rows(url) == [("serve", "view=cpu,keep_interpreter=0")]
    execute(url, update(PreparedFlameRow).values(body=b"\xff not json"))
    assert flame(url, "serve", view="cpu") == whole  # built again (and stored anew)
    assert flame(url, "serve", view="cpu") == whole


def check_running_never_uses_stored(url: str, _m: pytest.MonkeyPatch) -> None:
    """A running session's graph is built every time (a new sample shows at once) and
    never stored; finished again, the graph stored at its first end is not shown."""
    store_fixture(url, "copyonly")
    before = flame(url, "copyonly", view="cpu")
    assert len(flame_rows(url)) == 1
    store = Store.open(url)
    try:
        sid = reopen_with_a_late_sample(store, "copyonly", "late_fn")
        running = flame(url, "copyonly", view="cpu")
        assert b"late_fn" in running and b"late_fn" not in before
        with store.engine.connect() as conn:
            stored = conn.scalar(select(func.count()).select_from(PreparedFlameRow))
        assert stored == 1  # the old row only: nothing stored while running
        store.finish_session(sid)
    finally:
        store.close()
    assert flame(url, "copyonly", view="cpu") == running


CHECKS = (
    check_stored_equals_built,
    check_narrowed_graphs_are_built,
    check_running_never_uses_stored,
)


def check_id(check: object) -> str:
    """A check's test id: its name without `check_`."""
    return getattr(check, "__name__", "").removeprefix("check_")
