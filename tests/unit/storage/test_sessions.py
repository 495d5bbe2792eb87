"""Session rows through the one module that owns them (used by the store and the operator)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select

from kubeprof.storage import Store, sessions
from kubeprof.storage.models import SessionRow


def _row(store, sid):
    with store.engine.connect() as conn:
        return conn.execute(select(SessionRow.__table__).where(SessionRow.id == sid)).one()


def test_create_ensure_finish_and_meta(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path}/s.db")
    try:
        with store.engine.begin() as conn:
            a = sessions.create(conn, "run", hz=50, start_ns=5, meta={"x": "1"})
            b = sessions.create(conn, "run")
            t0 = datetime(2026, 1, 1, tzinfo=UTC)
            c = sessions.ensure(
                conn,
                "ns/s@abc",
                kind="cluster",
                command="cr",
                hz=99,
                started_at=t0,
                meta={"uid": "u"},
            )
            assert (
                sessions.ensure(
                    conn, "ns/s@abc", kind="cluster", command="other", hz=1, started_at=t0
                )
                == c
            )
            sessions.merge_meta(conn, c, {"pod:p": "ns/p"})
            sessions.finish(conn, a, "completed", end_ns=77, meta={"y": "2"})
            sessions.finish(conn, c, "failed")
            assert sessions.read_meta(conn, c) == {"uid": "u", "pod:p": "ns/p"}
            assert sessions.read_meta(conn, 999) == {}
        assert _row(store, b).name == "run-2"
        ra, rc = _row(store, a), _row(store, c)
        assert (ra.status, ra.end_ns, ra.start_ns, ra.hz) == ("completed", 77, 5, 50)
        with store.engine.connect() as conn:
            assert sessions.read_meta(conn, a) == {"x": "1", "y": "2"}
        assert (rc.kind, rc.command, rc.status, rc.end_ns) == ("cluster", "cr", "failed", 0)
        assert rc.ended_at is not None and ra.host
    finally:
        store.close()
