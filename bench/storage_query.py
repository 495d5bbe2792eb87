"""Flame-graph query time: load a session's aggregated CPU stacks from the store.

Writes N samples over a few thousand distinct stacks into a fresh SQLite store (or the
PostgreSQL at --store), then times `queries.load_profile` — what `kubeprof report` runs
before rendering — and the write rate on the way. Prints a markdown table.

    .venv/bin/python bench/storage_query.py --samples 100000 1000000 3000000
"""

from __future__ import annotations

import argparse
import random
import resource
import tempfile
import time

from kubeprof.model import Batch, CpuSample, Frame, FrameKind
from kubeprof.storage import Store
from kubeprof.storage import queries as q


def stacks(n: int, rng: random.Random) -> list[tuple[Frame, ...]]:
    funcs = [Frame(f"fn{i}", FrameKind.PYTHON, f"/app/mod{i % 40}.py", i) for i in range(400)]
    out = []
    for _ in range(n):
        depth = rng.randrange(5, 40)
        out.append(tuple(rng.choice(funcs) for _ in range(depth)))
    return out


def run(url: str, n_samples: int, n_stacks: int, batch: int) -> dict[str, float]:
    rng = random.Random(n_samples)
    pool = stacks(n_stacks, rng)
    store = Store.open(url)
    sid = store.create_session(f"bench-{n_samples}-{time.time_ns()}", hz=99)
    t0 = time.perf_counter()
    for start in range(0, n_samples, batch):
        samples = tuple(
            CpuSample(
                start + i,
                100 + (i % 4),
                100 + (i % 8),
                "worker",
                i % 2,
                pool[min(int(rng.paretovariate(1.2)) - 1, n_stacks - 1)],
            )
            for i in range(min(batch, n_samples - start))
        )
        store.write_batch(sid, Batch(samples=samples))
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with store.engine.connect() as conn:
        info = q.find_session(conn, str(sid))
        profile = q.load_profile(conn, info)
    query_s = time.perf_counter() - t0
    store.close()
    return {
        "samples": n_samples,
        "distinct": len({ws.stack for ws in profile.cpu}),
        "write_rows_s": n_samples / write_s,
        "query_s": query_s,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--samples", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--stacks", type=int, default=5000, help="distinct stacks in the pool")
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--store", help="database URL (default: a fresh SQLite file per size)")
    args = ap.parse_args()
    print("| samples | distinct stacks loaded | write rows/s | load_profile s | peak RSS MB |")
    print("|---:|---:|---:|---:|---:|")
    for n in args.samples:
        url = args.store or f"sqlite:///{tempfile.mkdtemp()}/bench.db"
        r = run(url, n, args.stacks, args.batch)
        print(
            f"| {r['samples']:,} | {r['distinct']:,} | {r['write_rows_s']:,.0f} | "
            f"{r['query_s']:.2f} | {r['rss_mb']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
