"""The UI's background warm-up waits for a quiet moment (`ui.activity`): a page being
answered does not share the process with a session's analysis, and the wait is bounded."""

from __future__ import annotations

import threading

from kubeprof.storage import Store
from kubeprof.ui.activity import Activity
from kubeprof.ui.routes import Routes
from kubeprof.ui.server import warm


def _waiter(activity: Activity, quiet_s: float, most_s: float) -> tuple[threading.Thread, list]:
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(activity.wait_quiet(quiet_s, most_s)))
    t.start()
    return t, got


def test_quiet_at_once_without_requests():
    assert Activity().wait_quiet(0.0, 60) is True


def test_waits_while_a_request_is_answered_then_for_the_quiet_moment():
    activity = Activity()
    with activity.request():
        t, got = _waiter(activity, 0.01, 60)
        t.join(0.3)
        assert t.is_alive() and got == []  # a request is in flight: still waiting
    t.join(30)
    assert got == [True]


def test_the_wait_is_bounded_under_endless_requests():
    activity = Activity()
    with activity.request():
        t, got = _waiter(activity, 0.01, 0.05)
        t.join(30)
    assert got == [False]


def test_warm_up_analyses_only_once_the_requests_leave_a_quiet_moment(ui_store):
    store = Store.open(ui_store)
    try:
        routes = Routes(store.engine)
        activity = Activity()
        with activity.request():
            t = threading.Thread(target=warm, args=(routes, activity))
            t.start()
            t.join(0.3)
            assert t.is_alive() and not routes.cache.summaries  # nothing analysed yet
        t.join(120)
        assert not t.is_alive()
        assert len(routes.cache.summaries) == 3  # every finished session of the store
    finally:
        store.close()
