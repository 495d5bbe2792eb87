"""Storing a completed session's report view off the reconcile path.

When a session's aggregation has finished, nothing more is written to it: the views that
`kubeprof report` and the web UI's page ask for first (`kubeprof.storage.prepared_views`)
are computed once here, so the first person to open it does not wait for the analysis.
One worker thread fills the sessions in the order they completed, one at a time (a big
session's view holds its records in memory while it is computed), and ends when none is
left. A failure is only logged: a view not stored is computed when it is first read.
"""

from __future__ import annotations

import logging
import queue
import threading

from sqlalchemy.engine import Engine

from kubeprof.reporting import store_views
from kubeprof.storage import prepared_views
from kubeprof.storage import queries as q

log = logging.getLogger(__name__)

_todo: queue.Queue[tuple[Engine, int]] = queue.Queue()
_lock = threading.Lock()
_worker: threading.Thread | None = None


def fill(engine: Engine, session_id: int) -> bool:
    """Compute and store the session's two default views now (`reporting.store_views`:
    the report's GPU window and the web UI page's whole session); True when both were
    stored. Never raises: the reader computes what is missing."""
    try:
        with engine.connect() as conn:
            info = q.find_session(conn, str(session_id))
            if info.id != session_id or not prepared_views.final(info):
                return False
            return store_views(conn, info) == 2
    except Exception:  # any failure: the view is computed when first read
        log.exception("prepared view of session %d not filled", session_id)
        return False


def note(engine: Engine, session_id: int) -> None:
    """The session's aggregation finished: fill its view soon, on the worker thread."""
    global _worker
    _todo.put((engine, session_id))
    with _lock:
        if _worker is None:
            _worker = threading.Thread(target=_run, name="view-fill", daemon=True)
            _worker.start()


def wait(timeout_s: float | None = None) -> bool:
    """Wait until every noted session was filled (tests, benchmarks); False on timeout."""
    with _lock:
        worker = _worker
    if worker is not None:
        worker.join(timeout_s)
        return not worker.is_alive()
    return True


def _run() -> None:
    global _worker
    while True:
        try:
            engine, session_id = _todo.get(timeout=0.5)
        except queue.Empty:
            with _lock:
                if _todo.empty():
                    _worker = None
                    return
            continue
        fill(engine, session_id)
