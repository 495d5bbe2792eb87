"""Ingest throughput into PostgreSQL: rows/s for a sweep of batch sizes.

Three paths are timed for each batch size:
  copy  the limit: the same rows COPYed into the same tables over one psycopg connection,
        one transaction per batch, with no API, decoding, interning or idempotency row
        (stack ids and row tuples prepared before the clock starts)
  db    BatchWriter.store() straight into Postgres (idempotency row + interning + COPY)
  http  the agent's encoder and IngestClient -> the operator's aiohttp ingest API -> db,
        with --senders concurrent agents
(db and http with the operator's background counting into stack_counts running, as it
runs in the operator), and then
  count `storage.compaction.compact` alone: the samples of one more cell's batches, stored
        with background counting off, counted into stack_counts (rows/s of samples)

Usage:
  .venv/bin/python bench/operator_ingest.py [--sizes 100,1000,5000,20000] [--rows 200000]
      [--senders 4] [--writers 2] [--dsn postgresql+psycopg://...] [--baseline-codec PATH]
Without --dsn a throw-away PostgreSQL 15 is started with the e2e harness (fsync off).
Prints a Markdown table; db and http also as a percentage of copy.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import random
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubeprof.agent.cluster.client import IngestClient  # noqa: E402
from kubeprof.model import (  # noqa: E402
    Batch,
    CpuSample,
    Frame,
    FrameKind,
    ProcessInfo,
    stack_hash,
)
from kubeprof.operator import ingest  # noqa: E402
from kubeprof.operator.db import BatchWriter, ensure_session  # noqa: E402
from kubeprof.operator.ingest import IngestApi, serve  # noqa: E402
from kubeprof.operator.registry import Registry, SessionEntry  # noqa: E402
from kubeprof.operator.targets import Target  # noqa: E402
from kubeprof.protocol import codec  # noqa: E402
from kubeprof.protocol.phases import Phase  # noqa: E402
from kubeprof.storage import Store, compaction  # noqa: E402
from kubeprof.storage.intern import Interner  # noqa: E402
from kubeprof.storage.models import ProcessRow, SampleRow  # noqa: E402


def load_codec(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("baseline_codec", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def make_stacks(n: int, depth: int, rng: random.Random) -> list[tuple[Frame, ...]]:
    """n distinct stacks sharing a common root, like a training loop's."""
    base = [Frame(f"frame_{i}", FrameKind.PYTHON, f"/app/mod{i % 7}.py", i) for i in range(40)]
    native = [Frame(f"native_{i}", FrameKind.NATIVE, "libtorch_cpu.so") for i in range(60)]
    out = []
    for _ in range(n):
        py = rng.sample(base, depth // 2)
        nat = rng.sample(native, depth - depth // 2)
        out.append(tuple(py + nat))
    return out


def make_batch(size: int, stacks: list, rng: random.Random, t0: int) -> Batch:
    samples = tuple(
        CpuSample(
            t0 + i * 10_101_010, 4000 + i % 8, 4000 + i % 32, "python", i % 16, rng.choice(stacks)
        )
        for i in range(size)
    )
    return Batch(
        samples=samples,
        processes=(ProcessInfo(4000, 1, "python", "python train.py", "c" * 64, "pod-uid"),),
    )


def bench_db(engine, sid: int, size: int, total: int, stacks, rng) -> float:
    w = BatchWriter(engine)
    batches = [make_batch(size, stacks, rng, i * size) for i in range(max(1, total // size))]
    t = time.perf_counter()
    for i, b in enumerate(batches):
        w.store(sid, f"db-{size}-{i}-{rng.random()}", "node-1", b)
    rows = sum(len(b.samples) + len(b.processes) for b in batches)
    return rows / (time.perf_counter() - t)


def settle(engine, sid: int) -> None:
    """Untimed: count what the background counting left and let its thread end, so the
    next cell (a COPY limit above all) does not share the machine with it."""
    compaction.compact(engine, sid)
    time.sleep(2.5)  # > 2 x the writers' 1 s round: their threads find nothing and end


def bench_count(engine, size: int, total: int, stacks, rng) -> float:
    """Samples/s of counting a session's stored samples (`compaction.compact`)."""
    sid = ensure_session(
        engine,
        "bench",
        f"count-{size}",
        f"uid-{time.time_ns()}",
        hz=99,
        started_at=datetime.now(UTC),
        meta={},
    )
    w = BatchWriter(engine, compact_every_s=1e6)  # stored only; counted below
    for i in range(max(1, total // size)):
        w.store(sid, f"count-{size}-{i}", "node-1", make_batch(size, stacks, rng, i * size))
    t = time.perf_counter()
    n = compaction.compact(engine, sid)
    return n / (time.perf_counter() - t)


def bench_copy(
    engine, sid: int, size: int, total: int, stacks, rng, *, text: bool = False
) -> float:
    """Rows/s of plain COPY: the ceiling for any ingest path on this database.

    text=False sends the rows with psycopg's write_row (as kubeprof's store does, so the
    per-row formatting in Python is included); text=True sends COPY text formatted before
    the clock starts (the database's own limit).
    """
    batches = [make_batch(size, stacks, rng, i * size) for i in range(max(1, total // size))]
    with engine.begin() as conn:
        ids = Interner().stack_ids_for(conn, stacks)
    s_cols = ["session_id", "node", "ts_ns", "pid", "tid", "cpu", "thread", "stack_id"]
    p_cols = ["session_id", "node", "pid", "ppid", "name", "cmdline", "container_id", "pod_uid"]
    tag = f"copy-{size}-{rng.random()}"
    prepared = [
        (
            [
                (sid, "node-1", x.ts_ns, x.pid, x.tid, x.cpu, x.thread, ids[stack_hash(x.stack)])
                for x in b.samples
            ],
            # the node differs per batch: a process row is an upsert in the real path
            [
                (sid, f"{tag}-{i}", p.pid, p.ppid, p.name, p.cmdline, p.container_id, p.pod_uid)
                for p in b.processes
            ],
        )
        for i, b in enumerate(batches)
    ]
    s_sql = f'COPY "{SampleRow.__tablename__}" ({", ".join(s_cols)}) FROM STDIN'
    p_sql = f'COPY "{ProcessRow.__tablename__}" ({", ".join(p_cols)}) FROM STDIN'
    payload = [
        [
            (sql, "".join("\t".join(map(str, r)) + "\n" for r in rows) if text else rows)
            for sql, rows in ((s_sql, srows), (p_sql, prows))
        ]
        for srows, prows in prepared
    ]
    raw = engine.raw_connection()
    try:
        pg = raw.driver_connection
        t = time.perf_counter()
        for parts in payload:
            with pg.transaction(), pg.cursor() as cur:
                for sql, rows in parts:
                    with cur.copy(sql) as copy:
                        if isinstance(rows, str):
                            copy.write(rows)
                        else:
                            for row in rows:
                                copy.write_row(row)
        elapsed = time.perf_counter() - t
    finally:
        raw.close()
    return sum(len(a) + len(b) for a, b in prepared) / elapsed


def bench_http(
    url: str, token: str, size: int, total: int, senders: int, stacks, rng, encode=codec.encode
) -> float:
    batches = [make_batch(size, stacks, rng, i * size) for i in range(max(1, total // size))]
    bodies = [
        (
            encode(b, batch_id=f"h-{size}-{i}-{rng.random()}", node=f"node-{i % senders}"),
            len(b.samples) + len(b.processes),
        )
        for i, b in enumerate(batches)
    ]

    def send(chunk: list) -> None:
        client = IngestClient(url, "bench", "ingest", token, timeout_s=120)
        for body, _rows in chunk:
            ans = client.post_batch(body, "x")
            if ans.status != 200:
                raise RuntimeError(f"ingest answered {ans.status}: {ans.detail}")

    chunks = [bodies[i::senders] for i in range(senders)]
    t = time.perf_counter()
    with ThreadPoolExecutor(senders) as ex:
        list(ex.map(send, chunks))
    return sum(r for _, r in bodies) / (time.perf_counter() - t)


def start_api(engine, sid: int, token: str, writers: int, senders: int) -> tuple[str, callable]:
    reg = Registry()
    # The senders stand for agents on nodes node-0..node-N: the session's target nodes.
    targets = [Target(f"pod-{i}", f"pod-{i}", "bench", f"node-{i}") for i in range(senders)]
    reg.put(SessionEntry("bench", "ingest", "uid-bench", sid, token, Phase.RUNNING, 0.0, targets))
    api = IngestApi(reg, BatchWriter(engine), writers=writers, startup_grace_s=0)
    loop = asyncio.new_event_loop()
    from tests.e2e.cluster.ports import pick

    port = pick(1)[0]
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(serve(api, "127.0.0.1", port))
        ready.set()
        loop.run_forever()

    threading.Thread(target=run, daemon=True).start()
    ready.wait(10)
    return f"http://127.0.0.1:{port}", lambda: loop.call_soon_threadsafe(loop.stop)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sizes", default="100,1000,5000,20000")
    p.add_argument("--rows", type=int, default=200_000, help="rows per measurement")
    p.add_argument("--senders", type=int, default=4)
    p.add_argument("--writers", type=int, default=2)
    p.add_argument("--stacks", type=int, default=500, help="distinct stacks")
    p.add_argument("--dsn", help="SQLAlchemy URL of an existing database")
    p.add_argument(
        "--baseline-codec",
        metavar="PATH",
        help="a codec module file (encode/decode/CodecError) to time the http "
        "path with as well, alternating with kubeprof.protocol.codec, e.g. "
        "`git show 13e38fb:agent/kubeprof/agent/cluster/codec.py`",
    )
    args = p.parse_args()
    pg = None
    if args.dsn:
        url = args.dsn
    else:
        from tests.e2e.cluster import Postgres

        pg_dir = Path(tempfile.mkdtemp(prefix="kubeprof-bench-pg-"))
        pg_dir.chmod(0o711)
        pg = Postgres(pg_dir / "pg").start()
        url = pg.url
    rng = random.Random(1)
    stacks = make_stacks(args.stacks, 24, rng)
    store = Store.open(url)
    try:
        sid = ensure_session(
            store.engine,
            "bench",
            "ingest",
            f"uid-{time.time_ns()}",
            hz=99,
            started_at=datetime.now(UTC),
            meta={},
        )
        # Warm the interner tables once so every size sees the same state.
        BatchWriter(store.engine).store(
            sid, f"warm-{time.time_ns()}", "node-1", make_batch(2000, stacks, rng, 0)
        )
        settle(store.engine, sid)
        token = "bench-token"
        api_url, stop = start_api(store.engine, sid, token, args.writers, args.senders)
        base = load_codec(args.baseline_codec) if args.baseline_codec else None
        print(
            f"| batch size (rows) | COPY text rows/s | COPY write_row rows/s (limit) | "
            f"db rows/s | db % of limit | http rows/s ({args.senders} senders, "
            f"{args.writers} writers) | http % of limit | counting samples/s |"
            + (" http rows/s, baseline codec | new / baseline |" if base else "")
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if base else ""))
        for size in (int(s) for s in args.sizes.split(",")):
            text_rate = bench_copy(store.engine, sid, size, args.rows, stacks, rng, text=True)
            copy_rate = bench_copy(store.engine, sid, size, args.rows, stacks, rng)
            db_rate = bench_db(store.engine, sid, size, args.rows, stacks, rng)
            settle(store.engine, sid)
            http_rate = bench_http(api_url, token, size, args.rows, args.senders, stacks, rng)
            settle(store.engine, sid)
            count_rate = bench_count(store.engine, size, args.rows, stacks, rng)
            extra = ""
            if base is not None:
                ingest.codec = base  # the API decodes with the baseline too
                try:
                    base_rate = bench_http(
                        api_url,
                        token,
                        size,
                        args.rows,
                        args.senders,
                        stacks,
                        rng,
                        encode=base.encode,
                    )
                finally:
                    ingest.codec = codec
                extra = f" {base_rate:,.0f} | {http_rate / base_rate:.2f}x |"
            print(
                f"| {size:,} | {text_rate:,.0f} | {copy_rate:,.0f} | {db_rate:,.0f} | "
                f"{100 * db_rate / copy_rate:.0f} % | {http_rate:,.0f} | "
                f"{100 * http_rate / copy_rate:.0f} % | {count_rate:,.0f} |" + extra,
                flush=True,
            )
        stop()
    finally:
        store.close()
        if pg is not None:
            pg.stop()
            shutil.rmtree(pg_dir, ignore_errors=True)  # ~750 MB a run: not left in /tmp
    return 0


if __name__ == "__main__":
    sys.exit(main())
