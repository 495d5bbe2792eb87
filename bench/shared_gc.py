"""Garbage collection of the shared stacks and frames: rows, time, memory, ingest meanwhile.

Hostile sessions each intern their own stacks (every stack with its own leaf frame, as the
issue-32 red team's deep-stack batches did) beside one innocent session whose samples use
stacks some hostile ones share. The hostile sessions are then removed and
`shared_gc.collect` runs while a writer keeps storing 100-sample batches into the innocent
session; printed: rows and table sizes before and after, the removal and collection times,
the collector's peak RSS above its start, the writer's latency during the collection, and
that the innocent session's stacks all still load.

Usage:
  .venv/bin/python bench/shared_gc.py [--dsn URL] [--sessions 16] [--stacks 10000]
      [--depth 12] [--keep-samples 100000] [--no-stack-index]
Without --dsn a throw-away PostgreSQL 15 is started with the e2e harness (fsync off).
--no-stack-index drops the stack_id indexes of migration shared_gc before loading (what the
collection costs without them).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _hwm_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default="")
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--stacks", type=int, default=10_000, help="own stacks per hostile session")
    ap.add_argument("--depth", type=int, default=12)
    ap.add_argument("--keep-samples", type=int, default=100_000)
    ap.add_argument("--no-stack-index", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from sqlalchemy import func, select, text

    from kubeprof.model import Batch, CpuSample, Frame, FrameKind
    from kubeprof.storage import Store, sessions, shared_gc
    from kubeprof.storage.intern import load_stacks
    from kubeprof.storage.models import FrameRow, SampleRow, StackRow

    pg = None
    if args.dsn:
        url = args.dsn
    else:
        from tests.e2e.cluster import Postgres

        d = Path(tempfile.mkdtemp(prefix="kubeprof-bench-pg-"))
        d.chmod(0o711)
        pg = Postgres(d / "pg").start()
        url = pg.url
    store = Store.open(url)
    try:
        if args.no_stack_index:
            with store.engine.begin() as conn:
                for t in ("samples", "gpu_activities", "stack_counts", "offcpu_samples"):
                    conn.execute(text(f"DROP INDEX ix_{t}_stack_id"))
        root = tuple(Frame(f"root{i}", FrameKind.PYTHON, "/app/m.py", i) for i in range(4))
        shared = [
            (*root, Frame(f"shared{i}", FrameKind.PYTHON, "/app/s.py", i)) for i in range(200)
        ]

        def own(s: int, i: int) -> tuple[Frame, ...]:
            mid = tuple(
                Frame(f"f{j}", FrameKind.NATIVE, "/lib/x.so") for j in range(args.depth - 6)
            )
            return root + mid + (Frame(f"leaf_{s}_{i}", FrameKind.NATIVE, "/lib/h.so"),)

        def cpu(stacks: list[tuple[Frame, ...]], t0: int = 0) -> Batch:
            return Batch(
                samples=tuple(CpuSample(t0 + i, 7, 8, "w", 0, st) for i, st in enumerate(stacks))
            )

        keep = store.create_session("innocent")
        t = time.perf_counter()
        for start in range(0, args.keep_samples, 10_000):
            n = min(10_000, args.keep_samples - start)
            store.write_batch(
                keep, cpu([shared[(start + i) % len(shared)] for i in range(n)], start)
            )
        hostile = []
        for s in range(args.sessions):
            sid = store.create_session(f"hostile{s}")
            hostile.append(sid)
            for start in range(0, args.stacks, 5_000):
                n = min(5_000, args.stacks - start)
                store.write_batch(sid, cpu([own(s, start + i) for i in range(n)] + shared[:20]))
        load_s = time.perf_counter() - t

        def sizes() -> tuple[int, int, float]:
            with store.engine.connect() as conn:
                mib = conn.scalar(
                    text(
                        "SELECT pg_total_relation_size('stacks') + pg_total_relation_size('frames')"
                    )
                )
                return (
                    int(conn.scalar(select(func.count()).select_from(StackRow)) or 0),
                    int(conn.scalar(select(func.count()).select_from(FrameRow)) or 0),
                    int(mib or 0) / 2**20,
                )

        before = sizes()
        t = time.perf_counter()
        with store.engine.begin() as conn:
            sessions.remove(conn, hostile)
        remove_s = time.perf_counter() - t

        lat: list[float] = []
        stop = threading.Event()
        writer = Store.open(url, migrate_schema=False)

        def write() -> None:
            i = 0
            while not stop.is_set():
                t0 = time.perf_counter()
                writer.write_batch(
                    keep, cpu([shared[(i + k) % 200] for k in range(100)], 10**9 + i)
                )
                lat.append(time.perf_counter() - t0)
                i += 100
                time.sleep(0.02)

        th = threading.Thread(target=write)
        th.start()
        Path("/proc/self/clear_refs").write_text("5")
        base = _hwm_kib()
        t = time.perf_counter()
        got = shared_gc.collect(store.engine)
        gc_s = time.perf_counter() - t
        peak = _hwm_kib() - base
        stop.set()
        th.join()
        writer.close()
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM stacks, frames"))
        after = sizes()
        with store.engine.connect() as conn:
            ids = set(
                conn.scalars(
                    select(SampleRow.stack_id).where(SampleRow.session_id == keep).distinct()
                )
            )
            intact = set(load_stacks(conn, ids)) == ids
        lat.sort()
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else 0.0
        print(
            f"load {load_s:.1f} s; stacks/frames before {before[0]:,}/{before[1]:,} "
            f"({before[2]:.1f} MiB), after {after[0]:,}/{after[1]:,} "
            f"({after[2]:.1f} MiB after VACUUM)"
        )
        print(
            f"remove {remove_s:.2f} s; collect {gc_s:.2f} s, deleted {got.stacks:,} stacks and "
            f"{got.frames:,} frames; collector peak RSS +{peak / 1024:.1f} MiB"
        )
        print(
            f"innocent writer during collect: {len(lat)} batches, p50 "
            f"{statistics.median(lat) if lat else 0:.3f} s, p99 {p99:.3f} s, "
            f"max {max(lat, default=0):.3f} s; "
            f"innocent stacks intact: {intact}"
        )
    finally:
        store.close()
        if pg is not None:
            pg.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
