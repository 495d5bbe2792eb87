"""A session whose samples are counted later (`storage.compaction`), and what every reader of
`stack_counts` answers about it: shared by the SQLite tests and the PostgreSQL e2e tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from kubeprof.model import Batch, CpuSample, Frame, FrameKind
from kubeprof.storage import Store, compaction
from kubeprof.storage import queries as q
from kubeprof.storage.models import SampleRow, StackCountRow
from kubeprof.storage.stack_counts import stack_counts
from kubeprof.ui import listing

MAIN = Frame("main", FrameKind.PYTHON, "/t.py", 1)
STACKS = [(MAIN, Frame(f"f{i}", FrameKind.PYTHON, "/t.py", i)) for i in range(5)]
SAMPLES = 3 * 60  # per session


def _sample(batch: int, i: int) -> CpuSample:
    """Sample i of a batch: 37 ms apart (~2 buckets a batch), 2 pids x 3 threads; thread 70
    is renamed "loader" late in batch 1."""
    renamed = batch == 1 and i > 30 and i % 3 == 0
    thread = "loader" if renamed else f"w{i % 3}"
    ts = batch * 10**9 + i * 37_000_000
    return CpuSample(ts, 7 + i % 2, 70 + i % 3, thread, i % 4, STACKS[(i * 7 + batch) % 5])


def write(store: Store, name: str) -> int:
    """Three batches of 60 samples over two nodes."""
    sid = store.create_session(name, hz=99)
    for b in range(3):
        samples = tuple(_sample(b, i) for i in range(60))
        store.write_batch(sid, Batch(samples=samples), node=f"node-{b % 2}")
    return sid


def answers(store: Store, name: str) -> dict[str, Any]:
    """What each reader says about the session (stack ids spelled out as stacks)."""
    out: dict[str, Any] = {}
    with store.engine.connect() as conn:
        info = q.find_session(conn, name)
        ranges = [None, (0, 0), (1, 1), (2, 3), (0, 9), (5, 9)]
        for r in ranges:
            for pids in (None, [("node-0", 7)], [("node-1", 8), ("node-0", 8)]):
                ws = q.cpu_stacks(conn, info, buckets=r, pids=pids)
                out[f"cpu_stacks {r} {pids}"] = sorted(
                    ((w.stack, w.pid, w.tid, w.thread, w.samples) for w in ws), key=repr
                )
        raw = stack_counts(conn, info.id)
        out["stack_counts rows"] = sorted((n, p, t, th, c) for n, p, t, th, _, c in raw)
        out["list_sessions"] = {s.name: s.samples for s in q.list_sessions(conn)}
        by_id = {s.id: s.name for s in q.list_sessions(conn)}
        out["listing"] = {by_id[k]: v for k, v in listing._nodes_and_samples(conn).items()}
    return out


def counted_rows(store: Store, session_id: int) -> int:
    """Samples in the session's whole-session count rows (what compaction has added)."""
    with store.engine.connect() as conn:
        return int(
            conn.scalar(
                select(func.coalesce(func.sum(StackCountRow.samples), 0)).where(
                    StackCountRow.session_id == session_id, StackCountRow.bucket == -1
                )
            )
        )


def sample_rows(store: Store, session_id: int) -> int:
    with store.engine.connect() as conn:
        return int(conn.scalar(select(func.count()).where(SampleRow.session_id == session_id)) or 0)


def check_none_half_full(store: Store) -> None:
    """Every reader answers the same with compaction not run, half run and fully run, and
    that equals a count over the sample rows; a stale empty session stored first (the
    lowest watermark) changes nothing."""
    store.create_session("stale-empty")
    sid = write(store, "later")
    other = write(store, "other")  # a second session's ids interleave nothing but exist
    compaction.compact(store.engine, other)
    before = answers(store, "later")
    assert counted_rows(store, sid) == 0
    with store.engine.connect() as conn:
        info = q.find_session(conn, "later")
        slow = Counter()
        for w in q.cpu_stacks_from_samples(conn, info):  # grouped by thread name too
            slow[(w.stack, w.pid, w.tid)] += w.samples
    fast = Counter()
    for st, p, t, _, n in before["cpu_stacks None None"]:
        fast[(st, p, t)] += n
    assert fast == slow
    assert before["list_sessions"]["later"] == SAMPLES
    assert before["listing"]["later"] == (2, SAMPLES)
    assert any(r[3] == "loader" for r in before["cpu_stacks None None"])

    assert compaction.compact(store.engine, sid, chunk=70, chunks=1) == 70
    assert counted_rows(store, sid) == 70  # half: the first 70 samples
    assert answers(store, "later") == before

    assert compaction.compact(store.engine, sid) == SAMPLES - 70
    assert counted_rows(store, sid) == SAMPLES
    assert compaction.compact(store.engine, sid) == 0
    assert answers(store, "later") == before


class Killed(RuntimeError):
    """Raised where a compaction is cut off between its counts and its watermark."""


def check_crash_counts_nothing_twice(store: Store, kill: Any = None) -> None:
    """A compaction cut off after adding its counts and before committing leaves neither
    (counts and watermark commit together); the next one counts each sample once.
    `kill(conn)` cuts it off (default: raise); it must make the transaction fail."""
    sid = write(store, "crash")
    before = answers(store, "crash")

    def cut(conn: Any) -> None:
        if kill is not None:
            kill(conn)
        raise Killed("cut off between the counts and the watermark")

    try:
        compaction.compact(store.engine, sid, chunk=100, between=cut)
    except Exception:  # noqa: BLE001 - killed: either our exception or the driver's
        pass
    else:
        raise AssertionError("the compaction was not cut off")
    assert counted_rows(store, sid) == 0
    assert answers(store, "crash") == before
    assert compaction.compact(store.engine, sid) == SAMPLES
    assert counted_rows(store, sid) == sample_rows(store, sid) == SAMPLES
    assert answers(store, "crash") == before


def work_of(store: Store, read: Callable[[Connection], object]) -> int:
    """What `read(conn)` costs, deterministically: on PostgreSQL the sample rows it fetched
    (this transaction's table statistics), on SQLite the virtual-machine steps it ran
    (SQLite keeps no per-table counters; equal rows read take equal steps)."""
    with store.engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            stat = (
                "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
                "FROM pg_stat_xact_user_tables WHERE relname = 'samples'"
            )
            before = int(conn.exec_driver_sql(stat).scalar_one())
            read(conn)
            return int(conn.exec_driver_sql(stat).scalar_one()) - before
        steps = [0]

        def step() -> int:
            steps[0] += 1
            return 0  # go on

        raw = conn.connection.driver_connection
        raw.set_progress_handler(step, 1)
        try:
            read(conn)
        finally:
            raw.set_progress_handler(None, 1)
        return steps[0]


def _listings(conn: Connection) -> object:
    """Every reader of the per-session totals: `kubeprof sessions`, find_session, the UI."""
    return (q.list_sessions(conn), q.find_session(conn, "busy"), listing._nodes_and_samples(conn))


def check_stale_sessions_cost_their_own_rows(store: Store) -> dict[str, int]:
    """An empty session and a killed recording stored first no longer make the session
    totals read the samples of sessions counted after them: the work is the same with 180
    or 1,980 counted samples stored after them (it grew with them through the lowest
    watermark). `settle` then counts the killed one's samples, once; answers never change.
    The work measured, by name."""
    store.create_session("stale-empty")
    killed = store.create_session("killed", hz=99)  # its recorder died: never finished
    store.write_batch(killed, Batch(samples=tuple(_sample(0, i) for i in range(60))))
    busy = write(store, "busy")
    store.finish_session(busy)
    work = {"before": work_of(store, _listings)}
    for _ in range(10):  # ten more times the counted samples, the same count rows
        for b in range(3):
            samples = tuple(_sample(b, i) for i in range(60))
            store.write_batch(busy, Batch(samples=samples), node=f"node-{b % 2}")
    assert compaction.compact(store.engine, busy) == 10 * SAMPLES
    work["after"] = work_of(store, _listings)
    with store.engine.connect() as conn:
        assert q.find_session(conn, "busy").samples == 11 * SAMPLES
        assert q.find_session(conn, "killed").samples == 60
        assert compaction.uncounted(conn) == [killed]
    assert work["after"] <= work["before"] * 1.05, work

    assert compaction.settle(store.engine) == 60
    assert counted_rows(store, killed) == 60
    with store.engine.connect() as conn:
        assert compaction.uncounted(conn) == []
        assert {s.name: s.samples for s in q.list_sessions(conn)} == {
            "stale-empty": 0,
            "killed": 60,
            "busy": 11 * SAMPLES,
        }
    work["settled"] = work_of(store, _listings)
    assert work["settled"] <= work["after"], work
    return work
