"""`kubeprof sessions rm`: delete stored sessions by name or id, or by age.

Which sessions go is decided by pure functions (`parse_age`, `select_for_removal`) so the
rules are tested without a store; the command only reads the list and deletes the rows.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from kubeprof.storage import Store, shared_gc
from kubeprof.storage import queries as q
from kubeprof.storage import sessions as rows

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> timedelta:
    """`30m`, `12h`, `7d`, `2w` (or plain seconds) as a timedelta; ValueError names the form."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if not m:
        raise ValueError(f"--older-than wants an age like 30m, 12h, 7d or 2w, got {text!r}")
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2) or "s"])


def select_for_removal(
    sessions: Sequence[q.SessionInfo],
    refs: Sequence[str],
    older_than: timedelta | None,
    now: datetime,
) -> list[q.SessionInfo]:
    """The sessions named by `refs` (name, id, or NAMESPACE/NAME of a cluster session) plus,
    with `older_than`, every session that started longer ago than that. An unknown name
    raises SessionNotFound before anything is deleted."""
    chosen: dict[int, q.SessionInfo] = {}
    for ref in refs:
        info = q.pick_session(sessions, ref)
        chosen[info.id] = info
    if older_than is not None:
        for s in sessions:
            started = s.started_at if s.started_at.tzinfo else s.started_at.replace(tzinfo=UTC)
            if now - started > older_than:
                chosen[s.id] = s
    return sorted(chosen.values(), key=lambda s: s.id)


def rm_command(
    refs: Sequence[str], older_than: str | None, store_url: str | None, *, dry_run: bool = False
) -> int:
    """Delete the sessions asked for; prints what went (or would go, with `dry_run`)."""
    if not refs and older_than is None:
        print(
            "kubeprof: error: name the sessions to remove (kubeprof sessions rm NAME...) "
            "or give --older-than AGE",
            file=sys.stderr,
        )
        return 2
    try:
        age = parse_age(older_than) if older_than is not None else None
    except ValueError as exc:
        print(f"kubeprof: error: {exc}", file=sys.stderr)
        return 2
    store = Store.open(store_url)
    try:
        with store.engine.begin() as conn:
            doomed = select_for_removal(
                q.list_sessions(conn, counts=False), refs, age, datetime.now(UTC)
            )
            if not dry_run:
                rows.remove(conn, [s.id for s in doomed])
        # Committed first: the stacks and frames only those sessions used are now unused.
        freed = shared_gc.collect(store.engine) if doomed and not dry_run else None
    finally:
        store.close()
    verb = "would remove" if dry_run else "removed"
    names = ", ".join(s.name for s in doomed) or "nothing"
    print(
        f"kubeprof: {verb} {len(doomed)} session{'s' * (len(doomed) != 1)}: {names}",
        file=sys.stderr,
    )
    if freed is not None:
        print(
            f"kubeprof: deleted {freed.stacks} stacks and {freed.frames} frames "
            "no remaining session uses",
            file=sys.stderr,
        )
    return 0
