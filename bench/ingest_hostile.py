"""Operator memory under hostile ingest bodies: peak RSS of the ingest server per case.

The ingest API runs in a child process (the operator's `serve()`, `IngestApi` and
`BatchWriter` over a real PostgreSQL) with one Running session on node "node-a". For each
case the child's peak RSS is reset (`/proc/PID/clear_refs` = 5), the bodies are sent, and
the answers, the peak (VmHWM), the RSS left afterwards and the slowest `/healthz` seen
meanwhile are printed as a Markdown row.

Usage:
  .venv/bin/python bench/ingest_hostile.py [--dsn URL] [--cases a,b,...,fairness]
  # issue 32: claimed spans, slow clients, three hostile sessions at full rate
  .venv/bin/python bench/ingest_hostile.py --cases span-115d,span-max,slow-16,fairness-3
  # issue 32: one request of 4,000 / 16,000 pods, then that session's aggregation;
  # 16 batches of 49,000 new frames and stacks each into one session (its quota)
  .venv/bin/python bench/ingest_hostile.py --cases pods-4k,pods-16k,quota-16x49k
  # the same cases against another checkout (e.g. the code before the limits):
  .venv/bin/python bench/ingest_hostile.py --tree /tmp/kubeprof-before
Without --dsn a throw-away PostgreSQL 15 is started with the e2e harness (fsync off).
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import inspect
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-token"
PODS = (4_000, 16_000)  # the many-pods cases: one process of its own pod each
NODE = "node-a"
POD = "0b6f2d3c-1111-4a4a-9c9c-000000000001"


# -- the child: an ingest server ---------------------------------------------------------


def serve(dsn: str, port: int) -> None:
    """Run the ingest API until killed (in whatever kubeprof is first on sys.path)."""
    import asyncio
    from datetime import UTC, datetime

    from kubeprof.operator.db import BatchWriter, ensure_session
    from kubeprof.operator.ingest import IngestApi
    from kubeprof.operator.ingest import serve as serve_api
    from kubeprof.operator.registry import Registry, SessionEntry
    from kubeprof.operator.targets import Target
    from kubeprof.protocol.phases import Phase
    from kubeprof.storage import Store

    store = Store.open(dsn)
    reg = Registry()
    # "other": a second tenant, for the fairness cases; hostile-2/3: more attackers;
    # pods-N: one session per many-pods case (aggregated alone afterwards)
    for name in ("hostile", "other", "hostile-2", "hostile-3", *(f"pods-{n}" for n in PODS)):
        sid = ensure_session(
            store.engine,
            "bench",
            name,
            f"uid-{name}-{time.time_ns()}",
            hz=99,
            started_at=datetime.now(UTC),
            meta={},
        )
        reg.put(
            SessionEntry(
                "bench",
                name,
                f"uid-{name}",
                sid,
                TOKEN,
                Phase.RUNNING,
                0.0,
                [Target(POD, "trainer", "bench", NODE)],
            )
        )
    params = inspect.signature(IngestApi).parameters
    if "exists" in params:  # the API before issue 10 asked the API server about sessions

        async def exists(_ns: str, _n: str) -> bool:
            return False

        api = IngestApi(reg, BatchWriter(store.engine), exists, writers=2)
    else:
        api = IngestApi(reg, BatchWriter(store.engine), writers=2, startup_grace_s=0)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(serve_api(api, "127.0.0.1", port))
    print("ready", flush=True)
    loop.run_forever()


# -- bodies --------------------------------------------------------------------------------


def _tiny_rows(n: int, batch_id: str) -> bytes:
    """gzip JSON of n minimal sample rows: tiny on the wire, huge once inflated."""
    return gzip.compress(
        b'{"v":1,"batch_id":"' + batch_id.encode() + b'","node":"node-a",'
        b'"frames":[],"samples":[' + b'[0,1,1,"",0,[]],' * (n - 1) + b'[0,1,1,"",0,[]]]}',
        compresslevel=9,
    )


def _batch(
    rows: int, depth: int, stacks: int, seed: int, batch_id: str, name_len: int = 0
) -> bytes:
    """A realistic body: CPU samples over `stacks` distinct stacks of `depth` frames."""
    from kubeprof.model import Batch, CpuSample, Frame, FrameKind, ProcessInfo
    from kubeprof.protocol import codec

    rng = random.Random(seed)
    frames = [
        Frame(f"fn_{seed}_{i}", FrameKind.PYTHON, f"/app/m{i % 9}.py", i)
        for i in range(max(depth * 4, 64))
    ]
    pool = [tuple(rng.sample(frames, depth)) for _ in range(stacks)]
    samples = tuple(
        CpuSample(i * 1000, 100 + i % 8, 100 + i % 64, "python", i % 16, pool[i % len(pool)])
        for i in range(rows)
    )
    b = Batch(
        samples=samples,
        processes=(ProcessInfo(100, 1, "python", "python train.py", "c" * 64, POD),),
    )
    doc = codec.to_dict(b, batch_id=batch_id, node=NODE)
    if name_len:  # as a hostile client sends it (kubeprof's encoder would clip it)
        doc["frames"][0] = ("x" * name_len, *doc["frames"][0][1:])
    return gzip.compress(json.dumps(doc).encode(), compresslevel=5)


def _distinct_stacks(rows: int, depth: int, batch_id: str) -> bytes:
    """Accepted, but as costly to decode and store as the limits allow: every sample has
    its own stack of `depth` frame indexes above 256 (each a fresh int object in Python)."""
    nframes = 300 + depth
    frames = b",".join(b'["f%d","python","/m.py",%d]' % (i, i) for i in range(nframes))
    rng = random.Random(7)
    samples = b",".join(
        b'[%d,1,1,"t",0,[%s]]'
        % (i, b",".join(b"%d" % rng.randrange(257, nframes) for _ in range(depth)))
        for i in range(rows)
    )
    return gzip.compress(
        b'{"v":1,"batch_id":"' + batch_id.encode() + b'","node":"node-a",'
        b'"frames":[' + frames + b'],"samples":[' + samples + b"]}",
        5,
    )


def _own_stacks(n: int, depth: int, seed: int) -> bytes:
    """The red team's quota batch: n samples, each on a stack of its own whose leaf frame
    is its own too (n new frames and n new stacks; n + depth - 1 <= 50,000 frames)."""
    shared = b",".join(b'["s%d","python","/m.py",%d]' % (i, i) for i in range(depth - 1))
    leaves = b",".join(b'["leaf_%d_%d","python","/l.py",1]' % (seed, i) for i in range(n))
    chain = b",".join(b"%d" % i for i in range(depth - 1))
    samples = b",".join(b'[%d,1,1,"t",0,[%s,%d]]' % (i, chain, depth - 1 + i) for i in range(n))
    return gzip.compress(
        b'{"v":1,"batch_id":"quota-' + b"%d-%d" % (seed, time.time_ns()) + b'","node":"node-a",'
        b'"frames":[' + shared + b"," + leaves + b'],"samples":[' + samples + b"]}",
        5,
    )


def _shared_rows(url: str) -> tuple[int, int]:
    """Rows in the shared stack and frame tables."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return (
                int(conn.scalar(text("SELECT count(*) FROM stacks")) or 0),
                int(conn.scalar(text("SELECT count(*) FROM frames")) or 0),
            )
    finally:
        engine.dispose()


DAY_NS = 86400 * 10**9


def _span(end_ns: int, start_ns: int, batch_id: str) -> bytes:
    """The red team's batch: one GPU kernel whose end lies far after its start."""
    from kubeprof.model import Batch, GpuActivity
    from kubeprof.protocol import codec

    return codec.encode(
        Batch(gpu_activities=(GpuActivity("kernel", "k", start_ns, end_ns, 0, 100, 1),)),
        batch_id=batch_id,
        node=NODE,
    )


def _pods(n: int) -> bytes:
    """The red team's batch: n processes, each of its own pod, one CPU sample each."""
    from kubeprof.model import Batch, CpuSample, Frame, FrameKind, ProcessInfo
    from kubeprof.protocol import codec

    stack = (Frame("step", FrameKind.PYTHON, "/app/train.py", 1),)
    return codec.encode(
        Batch(
            samples=tuple(
                CpuSample(10**12 + i, 1000 + i, 1000 + i, "p", 0, stack) for i in range(n)
            ),
            processes=tuple(
                ProcessInfo(1000 + i, 1, "p", "p", "", f"{i:08x}-0000-4000-8000-000000000000")
                for i in range(n)
            ),
        ),
        batch_id=f"pods-{n}-{time.time_ns()}",
        node=NODE,
    )


def aggregate_session(dsn: str, name: str) -> None:
    """Child: session-end aggregation of the newest session `bench/<name>` (the operator's
    `aggregate` then `store`), in whatever kubeprof is first on sys.path; prints JSON."""
    from sqlalchemy import select

    from kubeprof.operator import aggregate
    from kubeprof.storage import Store
    from kubeprof.storage.models import SessionRow

    store = Store.open(dsn)
    with store.engine.connect() as conn:
        sid = conn.scalar(
            select(SessionRow.id)
            .where(SessionRow.name.like(f"bench/{name}@%"))
            .order_by(SessionRow.id.desc())
        )
    t = time.perf_counter()
    with store.engine.begin() as conn:
        summary = aggregate.aggregate(conn, sid)
        aggregate.store(conn, sid, summary)
    print(
        json.dumps(
            {
                "seconds": time.perf_counter() - t,
                "pods": len(summary.pods),
                "peak_mb": _status_kb(os.getpid(), "VmHWM") / 1024,
            }
        )
    )


# Case name -> (what it is, [(body, headers)] sent at once).
Case = tuple[str, Callable[[], list[tuple[bytes, dict[str, str]]]]]
GZ = {"Content-Encoding": "gzip"}
SESSION = "x-bench-session"  # not sent: which of the two sessions a body goes to
CASES: dict[str, Case] = {
    "good": (
        "a real agent's batch: 2,000 samples, 40-frame stacks",
        lambda: [(_batch(2_000, 40, 200, 1, "good-1"), GZ)],
    ),
    "bomb-noheader": (
        "gzip bomb without Content-Encoding: 14.5 M rows",
        lambda: [(_tiny_rows(14_500_000, "bomb-1"), {})],
    ),
    "bomb-header": (
        "the same bomb with Content-Encoding: gzip",
        lambda: [(_tiny_rows(14_500_000, "bomb-2"), GZ)],
    ),
    "million-rows": (
        "1,000,001 minimal rows (issue: stored in 20 s)",
        lambda: [(_tiny_rows(1_000_001, "rows-1"), GZ)],
    ),
    "long-name": (
        "a 1 MB function name",
        lambda: [(_batch(10, 2, 1, 2, "long-1", name_len=1 << 20), GZ)],
    ),
    "bombs-x8": (
        "8 bombs at once, no Content-Encoding",
        lambda: [(_tiny_rows(14_500_000, f"bomb-x{i}"), {}) for i in range(8)],
    ),
    "largest-x4": (
        "4 at once of the largest batch the defaults accept "
        "(49,999 samples + 1 process, 60-frame stacks: 3.4 M values)",
        lambda: [
            (_batch(49_999, 60, 5_000, 10 + i, f"big-{i}-{time.time_ns()}"), GZ) for i in range(4)
        ],
    ),
    "distinct-x3": (
        "3 at once of those, two sessions (all three writer threads busy)",
        lambda: [
            (
                _distinct_stacks(50_000, 65, f"d3-{i}-{time.time_ns()}"),
                {**GZ, SESSION: "other" if i == 2 else "hostile"},
            )
            for i in range(3)
        ],
    ),
    "span-115d": (
        "one GPU kernel spanning 115 days (the issue's 246-byte batch)",
        lambda: [(_span(10**12 + 115 * DAY_NS, 10**12, f"span-{time.time_ns()}"), GZ)],
    ),
    "span-max": (
        "one GPU kernel from 0 to 2^63-1 ns",
        lambda: [(_span(2**63 - 1, 0, f"spanmax-{time.time_ns()}"), GZ)],
    ),
    "distinct-x2": (
        "2 at once of 50,000 samples, each with its own 65-frame stack "
        "(3.7 M values; accepted, the costliest to decode and intern)",
        lambda: [
            (_distinct_stacks(50_000, 65, f"distinct-{i}-{time.time_ns()}"), GZ) for i in range(2)
        ],
    ),
}


# -- the parent: measure ---------------------------------------------------------------------


def _post(
    port: int,
    body: bytes,
    headers: dict[str, str],
    session: str = "hostile",
    source: str = "127.0.0.1",
) -> int:
    """POST from `source` (any 127/8 address: a distinct client, as agents on distinct
    pods are)."""
    headers = dict(headers)
    session = headers.pop(SESSION, session)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600, source_address=(source, 0))
    try:
        conn.request(
            "POST",
            f"/v1/sessions/bench/{session}/batches",
            body=body,
            headers={"Authorization": f"Bearer {TOKEN}", **headers},
        )
        r = conn.getresponse()
        r.read()
        return r.status
    except (OSError, http.client.HTTPException):
        return 0  # connection dropped (the server died or gave up)
    finally:
        conn.close()


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _healthz(port: int, stop: threading.Event, worst: list[float]) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            conn.close()
        except OSError:
            pass
        worst[0] = max(worst[0], time.perf_counter() - t)
        stop.wait(0.05)


def fairness(port: int, rounds: int = 5) -> list[float]:
    """Seconds another session's 100-row batch takes while this session's four largest
    accepted batches are being written (issue 10: 16 s with two unbounded bodies)."""
    big = [_batch(49_999, 60, 5_000, 20 + i, f"fair-{i}-{time.time_ns()}") for i in range(4)]
    waits = []
    for r in range(rounds):
        with ThreadPoolExecutor(4) as ex:
            futs = [ex.submit(_post, port, b, GZ) for b in big]
            time.sleep(1.0)  # the big ones are being decoded and written
            small = _batch(100, 20, 10, 99, f"small-{r}-{time.time_ns()}")
            t = time.perf_counter()
            assert _post(port, small, GZ, session="other") == 200
            waits.append(time.perf_counter() - t)
            assert all(f.result() == 200 for f in futs)
        big = [
            _batch(49_999, 60, 5_000, 30 + r * 4 + i, f"fair-{r}-{i}-{time.time_ns()}")
            for i in range(4)
        ]
    return waits


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _hold(port: int, session: str, source: str) -> socket.socket:
    """Headers and 4 body bytes of a 100 kB upload, then nothing (a slow client)."""
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    s.sendall(
        (
            f"POST /v1/sessions/bench/{session}/batches HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Length: 100000\r\n\r\n"
        ).encode()
        + b"\x1f\x8b\x08\x00"
    )
    return s


def slow_clients(port: int, rounds: int = 20) -> tuple[list[int], list[float]]:
    """Another session's 100-row batch, every 0.25 s, while 16 connections from 16
    addresses hold uploads of one session open (issue 32: 16 such sockets gave everyone
    503 until they closed)."""
    held = [_hold(port, "hostile", f"127.0.1.{i + 1}") for i in range(16)]
    time.sleep(0.5)
    statuses, waits = [], []
    try:
        for r in range(rounds):
            small = _batch(100, 20, 10, 99, f"slow-{r}-{time.time_ns()}")
            t = time.perf_counter()
            statuses.append(_post(port, small, GZ, session="other", source="127.0.0.2"))
            waits.append(time.perf_counter() - t)
            time.sleep(0.25)
    finally:
        for s in held:
            s.close()
    return statuses, waits


def _template(rows: int, seed: int) -> bytes:
    """Plain JSON of a `rows`-sample batch whose id is a 32-character placeholder, so each
    post gets a fresh id at no cost to the sending side."""
    from kubeprof.model import Batch, CpuSample, Frame, FrameKind
    from kubeprof.protocol import codec

    frames = [Frame(f"fn_{seed}_{i}", FrameKind.PYTHON, f"/app/m{i % 9}.py", i) for i in range(80)]
    rng = random.Random(seed)
    pool = [tuple(rng.sample(frames, 30)) for _ in range(200)]
    b = Batch(
        samples=tuple(
            CpuSample(i * 1000, 100, 100 + i % 64, "python", i % 16, pool[i % len(pool)])
            for i in range(rows)
        )
    )
    return json.dumps(codec.to_dict(b, batch_id="X" * 32, node=NODE)).encode()


def fairness_hostile(
    port: int, seconds: float = 60.0, rows: int = 10_000, senders: int = 4
) -> tuple[dict[str, list[int]], list[int], list[float]]:
    """Three sessions each send `rows`-sample batches from `senders` threads as fast as
    they are answered; meanwhile another session sends a 100-row batch every 0.25 s.
    Returns the attackers' answers, the victim's answers and its latencies (seconds)."""
    hostile = ("hostile", "hostile-2", "hostile-3")
    templates = {h: _template(rows, 40 + i) for i, h in enumerate(hostile)}
    stop = threading.Event()
    answers: dict[str, list[int]] = {h: [] for h in hostile}

    def attack(session: str, source: str) -> None:
        while not stop.is_set():
            body = templates[session].replace(b"X" * 32, os.urandom(16).hex().encode(), 1)
            answers[session].append(_post(port, body, {}, session=session, source=source))

    # Each attacking session from its own address (its agents' pod), the victim from another.
    threads = [
        threading.Thread(target=attack, args=(h, f"127.0.3.{i + 1}"), daemon=True)
        for i, h in enumerate(hostile)
        for _ in range(senders)
    ]
    for t in threads:
        t.start()
    time.sleep(3)  # the attackers are at full rate
    statuses, waits = [], []
    end = time.monotonic() + seconds
    r = 0
    while time.monotonic() < end:
        small = _batch(100, 20, 10, 99, f"victim-{r}-{time.time_ns()}")
        r += 1
        t0 = time.perf_counter()
        statuses.append(_post(port, small, GZ, session="other", source="127.0.0.2"))
        waits.append(time.perf_counter() - t0)
        time.sleep(0.25)
    stop.set()
    for t in threads:
        t.join(120)
    return answers, statuses, waits


def _answers(statuses: list[int]) -> str:
    return ", ".join(f"{s}×{statuses.count(s)}" for s in sorted(set(statuses)))


def measure(pid: int, port: int, bodies: list[tuple[bytes, dict[str, str]]]) -> dict:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    start_kb = _status_kb(pid, "VmRSS")
    stop, worst = threading.Event(), [0.0]
    probe = threading.Thread(target=_healthz, args=(port, stop, worst), daemon=True)
    probe.start()
    t = time.perf_counter()
    with ThreadPoolExecutor(len(bodies)) as ex:
        statuses = list(ex.map(lambda bh: _post(port, *bh), bodies))
    elapsed = time.perf_counter() - t
    stop.set()
    probe.join()
    time.sleep(1)
    return {
        "statuses": statuses,
        "elapsed_s": elapsed,
        "start_mb": start_kb / 1024,
        "peak_mb": _status_kb(pid, "VmHWM") / 1024,
        "after_mb": _status_kb(pid, "VmRSS") / 1024,
        "healthz_s": worst[0],
        "wire_kb": sum(len(b) for b, _ in bodies) / 1024,
        "json_mb": sum(len(gzip.decompress(b)) for b, _ in bodies) / 2**20,
    }


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--dsn", help="SQLAlchemy URL of an existing database")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument(
        "--tree",
        type=Path,
        default=ROOT,
        help="checkout whose kubeprof the server runs (default: this one)",
    )
    p.add_argument("--serve", nargs=2, metavar=("DSN", "PORT"), help=argparse.SUPPRESS)
    p.add_argument("--aggregate", nargs=2, metavar=("DSN", "NAME"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return 0
    if args.aggregate:
        aggregate_session(*args.aggregate)
        return 0
    sys.path.insert(0, str(ROOT))
    from tests.e2e.cluster.ports import pick

    pg = None
    if args.dsn:
        url = args.dsn
    else:
        from tests.e2e.cluster import Postgres

        d = Path(tempfile.mkdtemp(prefix="kubeprof-bench-pg-"))
        d.chmod(0o711)
        pg = Postgres(d / "pg").start()
        url = pg.url
    port = pick(1)[0]
    tree = args.tree.resolve()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(tree / s) for s in ("agent", "operator", "src")),
    }
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", url, str(port)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        print(f"server: {tree} (pid {child.pid})")
        print(
            "| case | on the wire | JSON inflated | answers | peak RSS MiB (start) | "
            "RSS after MiB | slowest /healthz s | wall s |"
        )
        print("|---|---:|---:|---|---:|---:|---:|---:|")
        for name in args.cases.split(","):
            if name == "slow-16":
                Path(f"/proc/{child.pid}/clear_refs").write_text("5")
                statuses, waits = slow_clients(port)
                print(
                    f"\nanother session's 100-row batch while 16 idle uploads of one "
                    f"session are open: answers {_answers(statuses)}; p50 "
                    f"{_pct(waits, 0.5):.3f} s, p99 {_pct(waits, 0.99):.3f} s; server peak "
                    f"{_status_kb(child.pid, 'VmHWM') / 1024:,.0f} MiB",
                    flush=True,
                )
                continue
            if name == "fairness-3":
                Path(f"/proc/{child.pid}/clear_refs").write_text("5")
                hostile, statuses, waits = fairness_hostile(port)
                print(
                    "\nthree sessions at full rate (4 senders each, 10,000-row batches): "
                    + "; ".join(f"{h} {_answers(a)}" for h, a in hostile.items())
                    + f"\nanother session's 100-row batch every 0.25 s: answers "
                    f"{_answers(statuses)}; p50 {_pct(waits, 0.5):.3f} s, p99 "
                    f"{_pct(waits, 0.99):.3f} s, max {max(waits):.3f} s; server peak "
                    f"{_status_kb(child.pid, 'VmHWM') / 1024:,.0f} MiB",
                    flush=True,
                )
                continue
            if name == "quota-16x49k":
                # The red team's 16 batches, each adding 49,000 frames and stacks of its
                # own, sent one after another into one session.
                Path(f"/proc/{child.pid}/clear_refs").write_text("5")
                before = _shared_rows(url)
                statuses, t = [], time.perf_counter()
                for i in range(16):
                    statuses.append(_post(port, _own_stacks(49_000, 12, i), GZ))
                took = time.perf_counter() - t
                after = _shared_rows(url)
                print(
                    f"\n16 batches of 49,000 new frames and stacks into one session: answers "
                    f"{_answers(statuses)} in {took:.1f} s; stacks +{after[0] - before[0]:,}, "
                    f"frames +{after[1] - before[1]:,}; server peak "
                    f"{_status_kb(child.pid, 'VmHWM') / 1024:,.0f} MiB",
                    flush=True,
                )
                continue
            if name.startswith("pods-"):
                n = int(name.removeprefix("pods-").replace("k", "000"))
                body = _pods(n)
                t = time.perf_counter()
                status = _post(port, body, {}, session=f"pods-{n}")
                sent = time.perf_counter() - t
                agg = subprocess.run(
                    [sys.executable, __file__, "--aggregate", url, f"pods-{n}"],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                r = json.loads(agg.stdout.splitlines()[-1])
                print(
                    f"\n{n:,} processes of {n:,} pods in one {len(body) / 1024:,.0f} KB request: "
                    f"answer {status} in {sent:.2f} s; session-end aggregation of {r['pods']:,} "
                    f"pods {r['seconds']:.2f} s, aggregator peak {r['peak_mb']:,.0f} MiB",
                    flush=True,
                )
                continue
            if name == "fairness":
                waits = fairness(port)
                print(
                    f"\nanother session's 100-row batch during 4 x 50,000-row batches: "
                    f"{', '.join(f'{w:.2f}' for w in waits)} s (median "
                    f"{sorted(waits)[len(waits) // 2]:.2f} s)",
                    flush=True,
                )
                continue
            what, make = CASES[name]
            bodies = make()
            r = measure(child.pid, port, bodies)
            answers = ", ".join(
                f"{s}×{r['statuses'].count(s)}" if r["statuses"].count(s) > 1 else str(s)
                for s in sorted(set(r["statuses"]))
            )
            print(
                f"| {what} | {r['wire_kb']:,.1f} KB | {r['json_mb']:,.1f} MiB | {answers} | "
                f"{r['peak_mb']:,.0f} ({r['start_mb']:,.0f}) | {r['after_mb']:,.0f} | "
                f"{r['healthz_s']:.2f} | {r['elapsed_s']:.1f} |",
                flush=True,
            )
            if child.poll() is not None:
                print(f"server exited with {child.returncode}")
                break
    finally:
        child.kill()
        child.wait()
        if pg is not None:
            pg.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
