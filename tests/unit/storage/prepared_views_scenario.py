"""Stored report views (`storage.prepared_views`) against what is computed: shared by the
SQLite tests and the PostgreSQL e2e tests. Reports go through `kubeprof report` itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from kubeprof import reporting
from kubeprof.model import Batch, CpuSample, Frame, FrameKind
from kubeprof.storage import Store, prepared_views, sessions
from kubeprof.storage import queries as q
from kubeprof.storage.models import PreparedViewRow, SessionRow
from tests.unit.report.truth_store import store_fixture

# Fixtures of different shapes: a loop with findings, copies only, a server with a CPU
# window, pageable copies.
FIXTURES = ("compute", "copyonly", "serve", "pageable")


def rows(url: str, session: str | None = None) -> list[tuple[str, str, str]]:
    """(session name, options, fingerprint) of every stored view (of one session)."""
    store = Store.open(url)
    try:
        with store.engine.connect() as conn:
            query = select(
                SessionRow.name, PreparedViewRow.options, PreparedViewRow.fingerprint
            ).join(SessionRow, SessionRow.id == PreparedViewRow.session_id)
            if session is not None:
                query = query.where(SessionRow.name == session)
            return [tuple(r) for r in conn.execute(query.order_by(PreparedViewRow.options))]
    finally:
        store.close()


def report_files(url: str, name: str, out: Path, **flags: bool) -> dict[str, bytes]:
    """`kubeprof report` of session `name` as text and json, the files' bytes."""
    got = {}
    for fmt in ("text", "json"):
        path = out / f"{name}.{fmt}"
        text = reporting.TextOptions(width=0)
        assert reporting.report_command(name, fmt, None, str(path), url, text=text, **flags) == 0
        got[fmt] = path.read_bytes()
    return got


def reopen_with_a_late_sample(store: Store, name: str, function: str = "late") -> int:
    """Session `name` set running again and one more CPU sample (in `function`) written
    to it, as a reopened session receives; its id."""
    with store.engine.begin() as conn:
        sid = q.find_session(conn, name).id
        conn.execute(update(SessionRow).where(SessionRow.id == sid).values(status="running"))
    late = CpuSample(1, 1, 1, "late", 0, (Frame(function, FrameKind.PYTHON, "/l.py", 1),))
    store.write_batch(sid, Batch(samples=(late,)))
    return sid


def never_computed(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, a view that is computed fails the test (so it must be read back)."""

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("computed, not read back")

    monkeypatch.setattr(reporting, "_prepared", boom)


def check_loaded_equals_computed(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each fixture's text and JSON report: the first (computed, then stored) equals the
    one read back, byte for byte, for both option sets the CLI has."""
    for name in FIXTURES:
        store_fixture(url, name)
    flag_sets = ({}, {"whole_session": True, "keep_interpreter": True})
    first = {}
    for name in FIXTURES:
        for i, flags in enumerate(flag_sets):
            first[name, i] = report_files(url, name, tmp_path / f"computed{i}", **flags)
        assert len(rows(url, name)) == len(flag_sets)
    with monkeypatch.context() as m:
        never_computed(m)
        for name in FIXTURES:
            for i, flags in enumerate(flag_sets):
                again = report_files(url, name, tmp_path / f"loaded{i}", **flags)
                assert again == first[name, i], name


def check_changed_fingerprint_recomputes(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A view stored by other code is not shown: it is computed and stored anew."""
    store_fixture(url, "copyonly")
    old = reporting.load(url, "copyonly")
    [(_, _, fp)] = rows(url, "copyonly")
    assert fp == prepared_views.fingerprint()
    calls = []
    prepared = reporting._prepared
    monkeypatch.setattr(prepared_views, "fingerprint", lambda: "changed-analysis")
    monkeypatch.setattr(reporting, "_prepared", lambda *a: calls.append(1) or prepared(*a))
    assert reporting.load(url, "copyonly") == old
    assert calls == [1]
    assert rows(url, "copyonly") == [("copyonly", "keep_interpreter=0,whole=0", "changed-analysis")]


def check_running_never_stored(url: str) -> None:
    """A session still running (its data may change) is computed every time, never stored;
    once finished, it is."""
    store_fixture(url, "compute")
    store = Store.open(url)
    try:
        with store.engine.begin() as conn:
            sid = q.find_session(conn, "compute").id
            conn.execute(update(SessionRow).where(SessionRow.id == sid).values(status="running"))
        reporting.load(url, "compute")
        reporting.load(url, "compute")
        assert rows(url) == []
        store.finish_session(sid)
        reporting.load(url, "compute")
        assert len(rows(url, "compute")) == 1
    finally:
        store.close()


def check_deleting_a_session_removes_its_views(url: str) -> None:
    """Removing a session removes its stored views; the other session's stay."""
    store_fixture(url, "copyonly")
    store_fixture(url, "pageable")
    reporting.load(url, "copyonly")
    reporting.load(url, "pageable")
    store = Store.open(url)
    try:
        with store.engine.begin() as conn:
            gone = q.find_session(conn, "copyonly").id
            assert sessions.remove(conn, [gone]) == 1
        with store.engine.connect() as conn:
            left = conn.scalar(select(func.count()).where(PreparedViewRow.session_id == gone))
        assert left == 0
        assert [r[0] for r in rows(url)] == ["pageable"]
    finally:
        store.close()
