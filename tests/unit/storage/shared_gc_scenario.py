"""Two sessions sharing stacks, checked through garbage collection: one body for the SQLite
unit test and the PostgreSQL e2e test (`kubeprof.storage.shared_gc`)."""

from __future__ import annotations

import threading
import time

from sqlalchemy import func, select

from kubeprof.model import Batch, CpuSample, Frame, FrameKind, GpuActivity, OffCpuSample
from kubeprof.storage import Store, sessions, shared_gc
from kubeprof.storage.intern import load_stacks
from kubeprof.storage.models import FrameRow, SampleRow, StackRow
from kubeprof.storage.store import write_batch

MAIN = Frame("main", FrameKind.PYTHON, "/app/train.py", 1)
SHARED = Frame("shared", FrameKind.PYTHON, "/app/train.py", 2)
A_CPU = Frame("a_cpu", FrameKind.PYTHON, "/app/a.py", 3)
A_GPU = Frame("a_launch", FrameKind.NATIVE, "/lib/a.so")
A_WAIT = Frame("a_wait", FrameKind.KERNEL)
B_CPU = Frame("b_cpu", FrameKind.PYTHON, "/app/b.py", 4)


def _cpu(*stacks: tuple[Frame, ...]) -> tuple[CpuSample, ...]:
    return tuple(CpuSample(1_000 + i, 7, 8, "worker", 0, s) for i, s in enumerate(stacks))


BATCH_A = Batch(
    samples=_cpu((MAIN, SHARED), (MAIN, A_CPU), (MAIN, A_CPU)),
    gpu_activities=(GpuActivity("kernel", "k", 10, 20, 0, 7, 1, stack=(MAIN, A_GPU)),),
    offcpu_samples=(
        OffCpuSample(2_000, 7, 8, "worker", 5, 5, "futex", "bpf-sched", (MAIN, A_WAIT)),
    ),
)
BATCH_B = Batch(samples=_cpu((MAIN, SHARED), (MAIN, B_CPU)))


def counts(store: Store) -> tuple[int, int]:
    """(stacks, frames) rows."""
    with store.engine.connect() as conn:
        return (
            int(conn.scalar(select(func.count()).select_from(StackRow)) or 0),
            int(conn.scalar(select(func.count()).select_from(FrameRow)) or 0),
        )


def session_stacks(store: Store, session_id: int) -> set[tuple[Frame, ...]]:
    """The stacks of a session's samples, rebuilt from the shared tables."""
    with store.engine.connect() as conn:
        ids = set(
            conn.scalars(select(SampleRow.stack_id).where(SampleRow.session_id == session_id))
        )
        loaded = load_stacks(conn, ids)
    assert set(loaded) == ids, "a sample refers to a stack that is gone"
    return set(loaded.values())


def remove(store: Store, *session_ids: int) -> shared_gc.Collected:
    with store.engine.begin() as conn:
        sessions.remove(conn, session_ids)
    return shared_gc.collect(store.engine, chunk=2)  # several chunks even on this little data


def shared_rows_follow_sessions(store: Store) -> None:
    """Removing one session keeps what the other uses; removing both empties the tables;
    an Interner that cached a collected stack interns it afresh."""
    a = store.create_session("a")
    b = store.create_session("b")
    store.write_batch(a, BATCH_A)
    store.write_batch(b, BATCH_B)
    assert counts(store) == (5, 6)
    assert remove(store, a) == shared_gc.Collected(stacks=3, frames=3)
    assert counts(store) == (2, 3)
    assert session_stacks(store, b) == {(MAIN, SHARED), (MAIN, B_CPU)}
    # The store's Interner still caches a's stacks: the raised epoch makes it forget them.
    store.write_batch(b, Batch(samples=_cpu((MAIN, A_CPU))))
    assert session_stacks(store, b) == {(MAIN, SHARED), (MAIN, B_CPU), (MAIN, A_CPU)}
    assert counts(store) == (3, 4)
    assert remove(store, b) == shared_gc.Collected(stacks=3, frames=4)
    assert counts(store) == (0, 0)
    assert remove(store) == shared_gc.Collected(0, 0)


def writer_in_flight_keeps_its_stack(store: Store) -> None:
    """A batch interning an unused stack holds the collection off until it commits, and the
    collection then keeps that stack."""
    a = store.create_session("a")
    b = store.create_session("b")
    store.write_batch(a, BATCH_A)
    with store.engine.begin() as conn:
        sessions.remove(conn, [a])  # (MAIN, A_CPU) is unused from here on
    done: list[shared_gc.Collected] = []
    gc = threading.Thread(target=lambda: done.append(shared_gc.collect(store.engine)))
    with store.engine.begin() as conn:
        write_batch(conn, store.interner, b, Batch(samples=_cpu((MAIN, A_CPU))))
        gc.start()
        time.sleep(0.5)
        assert gc.is_alive() and not done, "the collection ran while a batch was interning"
    gc.join(timeout=30)
    assert done == [shared_gc.Collected(stacks=3, frames=3)], done
    assert session_stacks(store, b) == {(MAIN, A_CPU)}
    assert counts(store) == (1, 2)
