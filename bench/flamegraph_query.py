"""Flame-graph query time over 0.1–10 M stored samples: before and after `stack_counts`.

One session per store grows to each size in turn (batches of 10,000 samples from 16 threads
at 99 Hz, stacks drawn Pareto-skewed from a pool of 5,000, 5–40 frames: the pool of
bench/storage_query.py). At each size it times, on the same rows:

  before   queries.cpu_stacks_from_samples: GROUP BY over the session's sample rows
           (what load_profile ran before stack_counts)
  after    queries.cpu_stacks: the session's pre-counted rows in stack_counts
  range    queries.cpu_stacks for one 60 s window (61 buckets of 1 s)
  api      the UI's whole /flamegraph answer (query + call tree + JSON) for the session

--fold-cost times the UI's whole /flamegraph answer with CPython's own frames folded (the
default, as `kubeprof report`) and kept (`keep-interpreter=1`), side by side on one SQLite
store of BPF-shaped stacks (Python frames, each under python3.11's eval-loop frames):

    .venv/bin/python bench/flamegraph_query.py --fold-cost --sizes 1000000

Both stores run in one invocation: SQLite in a temp file, and PostgreSQL 15 started in a
temp folder (tests/e2e/cluster/postgres.py) unless --pg-url is given or --no-pg.

    .venv/bin/python bench/flamegraph_query.py --sizes 100000 1000000 3000000 10000000
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sqlalchemy.engine import Connection  # noqa: E402

from kubeprof.model import Batch, CpuSample, Frame, FrameKind  # noqa: E402
from kubeprof.storage import Store  # noqa: E402
from kubeprof.storage import queries as q  # noqa: E402
from kubeprof.ui import api  # noqa: E402

THREADS, HZ, BATCH = 16, 99, 10_000


def pool(n: int, rng: random.Random) -> list[tuple[Frame, ...]]:
    funcs = [Frame(f"fn{i}", FrameKind.PYTHON, f"/app/mod{i % 40}.py", i) for i in range(400)]
    return [tuple(rng.choice(funcs) for _ in range(rng.randrange(5, 40))) for _ in range(n)]


def samples_at(
    start: int, n: int, stacks: list[tuple[Frame, ...]], rng: random.Random
) -> tuple[CpuSample, ...]:
    """Samples `start`..`start + n` of 16 threads at 99 Hz, stacks drawn Pareto-skewed."""
    period = 1_000_000_000 // HZ
    return tuple(
        CpuSample(
            ((start + i) // THREADS) * period,
            1000,
            1000 + (start + i) % THREADS,
            "worker",
            0,
            stacks[min(int(rng.paretovariate(1.2)) - 1, 4999)],
        )
        for i in range(n)
    )


def timed(fn: Callable[[], object], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bpf_pool(n: int, rng: random.Random) -> list[tuple[Frame, ...]]:
    """Stacks as the BPF sampler records a Python program: each Python frame under three
    of CPython's own frames, a C leaf of the interpreter or of libc below the last."""
    funcs = [Frame(f"fn{i}", FrameKind.PYTHON, f"/app/mod{i % 40}.py", i) for i in range(400)]
    py = "/usr/bin/python3.11"
    glue = [
        Frame(name, FrameKind.NATIVE, py)
        for name in ("_PyEval_EvalFrameDefault", "_PyFunction_Vectorcall", "PyObject_Call")
    ]
    leaves = [
        Frame(f"c{i}", FrameKind.NATIVE, py if i % 2 else "/lib/libc.so.6") for i in range(50)
    ]
    out = []
    for _ in range(n):
        frames = [Frame("_start", FrameKind.NATIVE, py)]
        for _ in range(rng.randrange(5, 15)):
            frames += [*glue, rng.choice(funcs)]
        out.append((*frames, rng.choice(leaves)))
    return out


def fold_cost(url: str, size: int) -> list[str]:
    """The whole /flamegraph answer, CPython's frames folded vs kept, best of 5 each,
    alternating, on one session of `size` BPF-shaped samples."""
    rng = random.Random(1)
    stacks = bpf_pool(5000, rng)
    store = Store.open(url)
    sid = store.create_session("fold", hz=HZ)
    period = 1_000_000_000 // HZ
    for start in range(0, size, BATCH):
        store.write_batch(
            sid, Batch(samples=samples_at(start, min(BATCH, size - start), stacks, rng))
        )
    store.finish_session(sid, end_ns=(size // THREADS) * period)
    best = {True: float("inf"), False: float("inf")}
    with store.engine.connect() as conn:
        info = q.find_session(conn, str(sid))
        rows = len(q.cpu_stacks(conn, info))
        for _ in range(5):
            for keep in (True, False):
                best[keep] = min(
                    best[keep],
                    timed(lambda k=keep: api.flamegraph(conn, info, keep_interpreter=k), 1),
                )
    store.close()
    return [
        f"| SQLite | {size:,} | {rows:,} | {best[True]:.3f} | {best[False]:.3f} | "
        f"{best[False] / best[True]:.2f} |"
    ]


def measure(
    conn: Connection,
    info: q.SessionInfo,
    size: int,
) -> tuple[float, float, float, float, int]:
    """(before, after, 60 s range, whole API answer) seconds, and the (thread, stack) rows.
    Best of 3 runs each; "before" runs once above 1 M samples (it takes seconds)."""
    before = timed(lambda: q.cpu_stacks_from_samples(conn, info), 1 if size > 1e6 else 3)
    after = timed(lambda: q.cpu_stacks(conn, info))
    mid = info.duration_s / 2
    rng = api.buckets_for(info, mid - 30, mid + 30)
    window = timed(lambda: q.cpu_stacks(conn, info, buckets=rng))
    whole = timed(lambda: api.flamegraph(conn, info, view="cpu"))
    return before, after, window, whole, len(q.cpu_stacks(conn, info))


def run_store(label: str, url: str, sizes: list[int], out: list[str]) -> None:
    rng = random.Random(1)
    stacks = pool(5000, rng)
    store = Store.open(url)
    sid = store.create_session(f"bench-{time.time_ns()}", hz=HZ)
    period = 1_000_000_000 // HZ
    written, write_s = 0, 0.0
    for size in sorted(sizes):
        t0 = time.perf_counter()
        while written < size:
            n = min(BATCH, size - written)
            store.write_batch(sid, Batch(samples=samples_at(written, n, stacks, rng)))
            written += n
        write_s += time.perf_counter() - t0
        store.finish_session(sid, end_ns=(written // THREADS) * period)
        with store.engine.connect() as conn:
            before, after, window, whole, rows = measure(conn, q.find_session(conn, str(sid)), size)
        line = (
            f"| {label} | {size:,} | {rows:,} | {written / write_s:,.0f} | {before:.2f} | "
            f"{after:.3f} | {window:.3f} | {whole:.2f} |"
        )
        print(line, flush=True)
        out.append(line)
    store.close()


def write_cost(url: str, samples: int = 200_000) -> list[str]:
    """Write CPU time per sample on SQLite (in-process, so CPU time is the cost even on a
    busy machine): the batches (samples only), then counting them into stack_counts
    (`compaction.compact`, after the batches)."""
    from kubeprof.storage import compaction

    rng = random.Random(1)
    stacks = pool(5000, rng)
    store = Store.open(url)
    sid = store.create_session(f"write-{time.time_ns()}", hz=HZ)
    cpu = 0.0
    try:
        for start in range(0, samples, BATCH):
            batch = Batch(samples=samples_at(start, BATCH, stacks, rng))
            c = time.process_time()
            store.write_batch(sid, batch)
            cpu += time.process_time() - c
        c = time.process_time()
        compaction.compact(store.engine, sid)
        counting = time.process_time() - c
    finally:
        store.close()
    return [
        f"| SQLite | samples (batches) | {samples:,} | {cpu:.2f} | {samples / cpu:,.0f} |",
        f"| SQLite | + stack_counts (compaction) | {samples:,} | {counting:.2f} "
        f"| {samples / counting:,.0f} |",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--pg-url", default="", help="an existing PostgreSQL database to use")
    ap.add_argument("--no-pg", action="store_true")
    ap.add_argument("--no-sqlite", action="store_true")
    ap.add_argument(
        "--write-cost",
        action="store_true",
        help="only: write CPU time of the batches and of counting them (SQLite)",
    )
    ap.add_argument(
        "--fold-cost",
        action="store_true",
        help="only: the API flame graph with CPython's frames folded vs kept (SQLite)",
    )
    args = ap.parse_args()
    if args.fold_cost:
        print("| store | samples | (thread, stack) rows | kept s | folded s | folded / kept |")
        print("|---|---:|---:|---:|---:|---:|")
        for size in args.sizes:
            with tempfile.TemporaryDirectory(prefix="kp-flame-bench-") as tmp:
                print("\n".join(fold_cost(f"sqlite:///{tmp}/fold.db", size)), flush=True)
        return
    if args.write_cost:
        with tempfile.TemporaryDirectory(prefix="kp-flame-bench-") as tmp:
            rows = write_cost(f"sqlite:///{tmp}/write.db")
        print("| store | writes | samples | CPU s | samples per CPU-second |")
        print("|---|---|---:|---:|---:|")
        print("\n".join(rows))
        return
    out = [
        "| store | samples | (thread, stack) rows | write samples/s | before s | after s "
        "| 60 s range s | API flame graph s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(out), flush=True)
    with tempfile.TemporaryDirectory(prefix="kp-flame-bench-") as tmp:
        if not args.no_sqlite:
            run_store("SQLite", f"sqlite:///{tmp}/bench.db", args.sizes, out)
        if not args.no_pg:
            if args.pg_url:
                run_store("PostgreSQL 15", args.pg_url, args.sizes, out)
            else:
                from tests.e2e.cluster.postgres import Postgres

                pg_dir = Path(tempfile.mkdtemp(prefix="kp-flame-bench-pg-"))
                pg_dir.chmod(0o755)  # the server runs as user postgres
                pg = Postgres(pg_dir / "pg").start()
                try:
                    run_store("PostgreSQL 15", pg.url, args.sizes, out)
                finally:
                    pg.stop()
                    shutil.rmtree(pg_dir, ignore_errors=True)
    print("\n".join(out))


if __name__ == "__main__":
    main()
