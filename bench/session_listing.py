"""The sessions list beside a stale session: session totals and `kubeprof sessions`.

Stores first one empty session and one killed recording (samples written, never finished:
no writer counted them), then N finished sessions of M samples each (counted), and times
what reads every session's totals: `stack_counts.session_totals` (the web UI's list, and
`find_session` under `kubeprof report`), `queries.list_sessions` (what `kubeprof sessions`
prints) and the whole `kubeprof sessions` command in-process (store open included; its
first call counts the killed recording's samples where the tree has `compaction.settle`,
reported apart). Runs against whichever kubeprof is first on PYTHONPATH, so an older tree
can be timed alternating with this one. Prints one Markdown row per store.

    .venv/bin/python bench/session_listing.py [--sessions 20] [--samples 50000]
        [--killed 5000] [--repeat 7] [--stores sqlite,postgresql] [--label new]
Without --dsn a throw-away PostgreSQL 15 is started with the e2e harness (fsync off).
"""

from __future__ import annotations

import contextlib
import io
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pg_scratch
from kubeprof import reporting
from kubeprof.model import Batch, CpuSample, Frame, FrameKind
from kubeprof.storage import Store, compaction
from kubeprof.storage import queries as q
from kubeprof.storage.stack_counts import session_totals

BATCH = 10_000  # samples per write_batch


def _stacks(rng: random.Random) -> list[tuple[Frame, ...]]:
    funcs = [Frame(f"fn{i}", FrameKind.PYTHON, f"/app/m{i % 20}.py", i) for i in range(200)]
    return [tuple(rng.choice(funcs) for _ in range(rng.randrange(5, 25))) for _ in range(500)]


def _write(store: Store, sid: int, n: int, stacks: list[tuple[Frame, ...]], seed: int) -> None:
    """`n` samples at 99 Hz over 8 threads (so each second is a count bucket)."""
    rng = random.Random(seed)
    for start in range(0, n, BATCH):
        samples = tuple(
            CpuSample(
                (start + i) * 10_101_010 // 8,
                100,
                100 + (start + i) % 8,
                f"w{(start + i) % 8}",
                0,
                stacks[min(int(rng.paretovariate(1.2)) - 1, len(stacks) - 1)],
            )
            for i in range(min(BATCH, n - start))
        )
        store.write_batch(sid, Batch(samples=samples), node=f"node-{sid % 2}")


def build(url: str, sessions: int, samples: int, killed: int) -> float:
    """The store described above; seconds it took."""
    t0 = time.perf_counter()
    stacks = _stacks(random.Random(1))
    store = Store.open(url)
    try:
        store.create_session("stale-empty")
        dead = store.create_session("killed", hz=99)
        _write(store, dead, killed, stacks, 0)
        for i in range(sessions):
            sid = store.create_session(f"s{i}", hz=99)
            _write(store, sid, samples, stacks, i + 1)
            store.finish_session(sid)  # counts its samples (compaction)
    finally:
        store.close()
    return time.perf_counter() - t0


def _median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def measure(url: str, repeat: int, expect: int) -> dict[str, float]:
    """Medians (ms) of the reads; checks every session's total first."""
    store = Store.open(url)
    try:
        with store.engine.connect() as conn:
            listed = q.list_sessions(conn)
            assert sum(s.samples for s in listed) == expect, (expect, listed)
            totals = _median_ms(lambda: session_totals(conn), repeat)
            lists = _median_ms(lambda: q.list_sessions(conn), repeat)
    finally:
        store.close()

    def command() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            reporting.sessions_command(url)

    first = _median_ms(command, 1)  # counts the killed recording, where the tree settles
    return {"totals": totals, "list": lists, "first": first, "cmd": _median_ms(command, repeat)}


def main() -> int:
    p = pg_scratch.arguments(__doc__)
    p.add_argument("--sessions", type=int, default=20, help="finished sessions")
    p.add_argument("--samples", type=int, default=50_000, help="samples per finished session")
    p.add_argument("--killed", type=int, default=5_000, help="the killed recording's samples")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--stores", default="sqlite,postgresql")
    p.add_argument("--label", default="", help="the first column (which tree ran)")
    args = p.parse_args()
    tree = "settles" if hasattr(compaction, "settle") else "no settle"
    print(
        "| tree | store | build s | session_totals ms | list_sessions ms | "
        "kubeprof sessions, first ms | kubeprof sessions ms |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    expect = args.sessions * args.samples + args.killed
    for kind in args.stores.split(","):
        tmp = Path(tempfile.mkdtemp(prefix="kubeprof-bench-list-"))
        sqlite = f"sqlite:///{tmp}/kp.db"
        try:
            db = (
                contextlib.nullcontext(sqlite)
                if kind == "sqlite"
                else pg_scratch.database(args.dsn)
            )
            with db as url:
                built = build(url, args.sessions, args.samples, args.killed)
                m = measure(url, args.repeat, expect)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(
            f"| {args.label or tree} | {kind} | {built:.1f} | {m['totals']:.1f} | "
            f"{m['list']:.1f} | {m['first']:.1f} | {m['cmd']:.1f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
