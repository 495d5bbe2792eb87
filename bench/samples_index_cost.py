"""What the `samples (session_id, id)` index (migration 0110) costs a batch's write.

One PostgreSQL (or --dsn), one process: cells of `--rows` CPU samples written through
`Store.write_batch` (one COPY into `samples` per batch) alternate with the index dropped
and present, so both see the same machine and a table grown alike; the index is dropped
and rebuilt between cells, untimed. Prints one Markdown row per cell and the median of
each side. A cross-run comparison (bench/operator_ingest.py old tree against new) is too
noisy on a shared machine to see a few percent.

    .venv/bin/python bench/samples_index_cost.py [--rows 200000] [--batch 5000] [--rounds 4]
"""

from __future__ import annotations

import random
import statistics
import time

from sqlalchemy import text

import pg_scratch
from kubeprof.model import Batch, CpuSample, Frame, FrameKind
from kubeprof.storage import Store

INDEX = "ix_samples_session_id_id"


def _cell(store: Store, rows: int, batch: int, stacks: list[tuple[Frame, ...]]) -> float:
    """Rows/s of writing `rows` samples of a new session, `batch` a transaction."""
    rng = random.Random(rows)
    sid = store.create_session("cell", hz=99)
    batches = [
        Batch(
            samples=tuple(
                CpuSample(s + i, 100, 100 + i % 32, "w", 0, rng.choice(stacks))
                for i in range(min(batch, rows - s))
            )
        )
        for s in range(0, rows, batch)
    ]
    t0 = time.perf_counter()
    for b in batches:
        store.write_batch(sid, b, node="node-1")
    return rows / (time.perf_counter() - t0)


def _set_index(store: Store, present: bool) -> None:
    with store.engine.begin() as conn:
        conn.execute(text(f"DROP INDEX IF EXISTS {INDEX}"))
        if present:
            conn.execute(text(f"CREATE INDEX {INDEX} ON samples (session_id, id)"))
        conn.execute(text("ANALYZE samples"))


def _rounds(
    store: Store, rows: int, batch: int, rounds: int, stacks: list[tuple[Frame, ...]]
) -> dict[bool, list[float]]:
    """Rows/s of each cell, by whether the index was present; prints each."""
    rates: dict[bool, list[float]] = {False: [], True: []}
    _cell(store, batch, batch, stacks)  # interns the stacks, untimed
    print(f"| round | index | rows/s ({batch:,} a batch) |\n|---:|---|---:|")
    for r in range(rounds):
        for present in (False, True) if r % 2 == 0 else (True, False):
            _set_index(store, present)
            rate = _cell(store, rows, batch, stacks)
            rates[present].append(rate)
            print(f"| {r + 1} | {'with' if present else 'without'} | {rate:,.0f} |")
    _set_index(store, True)  # the schema as migrated
    return rates


def main() -> int:
    p = pg_scratch.arguments(__doc__)
    p.add_argument("--rows", type=int, default=200_000, help="samples per cell")
    p.add_argument("--batch", type=int, default=5_000, help="samples per batch")
    p.add_argument("--rounds", type=int, default=4, help="pairs of cells")
    args = p.parse_args()
    funcs = [Frame(f"fn{i}", FrameKind.PYTHON, "/app/m.py", i) for i in range(200)]
    rng = random.Random(1)
    stacks = [tuple(rng.choice(funcs) for _ in range(24)) for _ in range(500)]
    with pg_scratch.database(args.dsn) as url:
        store = Store.open(url)
        try:
            rates = _rounds(store, args.rows, args.batch, args.rounds, stacks)
        finally:
            store.close()
    without, with_ = (statistics.median(rates[k]) for k in (False, True))
    print(f"\nmedian rows/s without {without:,.0f}, with {with_:,.0f}: {with_ / without:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
