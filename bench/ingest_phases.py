"""Where one batch's time goes on the operator's db path, beside the raw COPY limit.

One process, one throw-away PostgreSQL 15 (the e2e harness's, fsync off): cells of
`--batches` batches through `BatchWriter.store` (background counting off) alternate with
`operator_ingest.bench_copy` (the same rows COPYed with no API), `--rounds` times. Per
batch it prints the limit, the whole store, and inside it the samples' COPY and
`write_batch` (all but the id row, BEGIN and the commit), in ms; what is left of the
store beside the COPY is its per-batch cost.

Usage:
  .venv/bin/python bench/ingest_phases.py [--size 1000] [--batches 50] [--rounds 4]
Run it against another tree with that tree's PYTHONPATH (the timers wrap functions both
trees have).
"""

from __future__ import annotations

import argparse
import functools
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import operator_ingest as oi  # noqa: E402
from kubeprof.operator import db  # noqa: E402
from kubeprof.storage import Store, cpu_samples  # noqa: E402

SPENT: defaultdict[str, float] = defaultdict(float)


def wall(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, adding the wall time of each call to SPENT[label]."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        SPENT[label] += time.perf_counter() - t
        return out

    return wrapper


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--size", type=int, default=1000, help="samples per batch")
    p.add_argument("--batches", type=int, default=50, help="batches per cell")
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args()
    cpu_samples.copy_tuples = wall("samples COPY", cpu_samples.copy_tuples)
    db.write_batch = wall("write_batch", db.write_batch)
    from tests.e2e.cluster import Postgres

    pg_dir = Path(tempfile.mkdtemp(prefix="kubeprof-bench-pg-"))
    pg_dir.chmod(0o711)
    pg = Postgres(pg_dir / "pg").start()
    try:
        rng = random.Random(1)
        stacks = oi.make_stacks(500, 24, rng)
        store = Store.open(pg.url)
        sid = db.ensure_session(
            store.engine, "bench", "phases", "uid", hz=99, started_at=datetime.now(UTC), meta={}
        )
        writer = db.BatchWriter(store.engine, compact_every_s=1e9)
        writer.store(sid, "warm", "node-1", oi.make_batch(2000, stacks, rng, 0))
        n, size = args.batches, args.size
        print(
            "| round | COPY limit ms/batch | store ms/batch | % of limit | samples COPY ms "
            "| write_batch ms | store beside the COPY ms |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for r in range(args.rounds):
            limit = oi.bench_copy(store.engine, sid, size, n * size, stacks, rng)
            batches = [oi.make_batch(size, stacks, rng, i * size) for i in range(n)]
            SPENT.clear()
            t = time.perf_counter()
            for i, b in enumerate(batches):
                writer.store(sid, f"p-{r}-{i}", "node-1", b)
            ms = 1000 * (time.perf_counter() - t) / n
            limit_ms = 1000 * (size + 1) / limit
            copy_ms = 1000 * SPENT["samples COPY"] / n
            print(
                f"| {r + 1} | {limit_ms:.2f} | {ms:.2f} | {100 * limit_ms / ms:.0f} % "
                f"| {copy_ms:.2f} | {1000 * SPENT['write_batch'] / n:.2f} | {ms - copy_ms:.2f} |",
                flush=True,
            )
        store.close()
    finally:
        pg.stop()
        shutil.rmtree(pg_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
