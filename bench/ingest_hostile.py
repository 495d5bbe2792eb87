"""Operator memory under hostile ingest bodies: peak RSS of the ingest server per case.

The ingest API runs in a child process (the operator's `serve()`, `IngestApi` and
`BatchWriter` over a real PostgreSQL) with one Running session on node "node-a". For each
case the child's peak RSS is reset (`/proc/PID/clear_refs` = 5), the bodies are sent, and
the answers, the peak (VmHWM), the RSS left afterwards and the slowest `/healthz` seen
meanwhile are printed as a Markdown row.

Usage:
  .venv/bin/python bench/ingest_hostile.py [--dsn URL] [--cases a,b,...,fairness]
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
    for name in ("hostile", "other"):  # "other": a second tenant, for the fairness case
        sid = ensure_session(store.engine, "bench", name, f"uid-{name}-{time.time_ns()}",
                             hz=99, started_at=datetime.now(UTC), meta={})
        reg.put(SessionEntry("bench", name, f"uid-{name}", sid, TOKEN, Phase.RUNNING, 0.0,
                             [Target(POD, "trainer", "bench", NODE)]))
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
    return gzip.compress(b'{"v":1,"batch_id":"' + batch_id.encode() + b'","node":"node-a",'
                         b'"frames":[],"samples":[' + b'[0,1,1,"",0,[]],' * (n - 1)
                         + b'[0,1,1,"",0,[]]]}', compresslevel=9)


def _batch(rows: int, depth: int, stacks: int, seed: int, batch_id: str,
           name_len: int = 0) -> bytes:
    """A realistic body: CPU samples over `stacks` distinct stacks of `depth` frames."""
    from kubeprof.model import Batch, CpuSample, Frame, FrameKind, ProcessInfo
    from kubeprof.protocol import codec

    rng = random.Random(seed)
    frames = [Frame(f"fn_{seed}_{i}", FrameKind.PYTHON, f"/app/m{i % 9}.py", i)
              for i in range(max(depth * 4, 64))]
    pool = [tuple(rng.sample(frames, depth)) for _ in range(stacks)]
    samples = tuple(CpuSample(i * 1000, 100 + i % 8, 100 + i % 64, "python", i % 16,
                              pool[i % len(pool)]) for i in range(rows))
    b = Batch(samples=samples, processes=(ProcessInfo(100, 1, "python", "python train.py",
                                                      "c" * 64, POD),))
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
        b"[%d,1,1,\"t\",0,[%s]]" % (i, b",".join(b"%d" % rng.randrange(257, nframes)
                                                  for _ in range(depth)))
        for i in range(rows))
    return gzip.compress(b'{"v":1,"batch_id":"' + batch_id.encode() + b'","node":"node-a",'
                         b'"frames":[' + frames + b'],"samples":[' + samples + b']}', 5)


# Case name -> (what it is, [(body, headers)] sent at once).
Case = tuple[str, Callable[[], list[tuple[bytes, dict[str, str]]]]]
GZ = {"Content-Encoding": "gzip"}
SESSION = "x-bench-session"  # not sent: which of the two sessions a body goes to
CASES: dict[str, Case] = {
    "good": ("a real agent's batch: 2,000 samples, 40-frame stacks",
             lambda: [(_batch(2_000, 40, 200, 1, "good-1"), GZ)]),
    "bomb-noheader": ("gzip bomb without Content-Encoding: 14.5 M rows",
                      lambda: [(_tiny_rows(14_500_000, "bomb-1"), {})]),
    "bomb-header": ("the same bomb with Content-Encoding: gzip",
                    lambda: [(_tiny_rows(14_500_000, "bomb-2"), GZ)]),
    "million-rows": ("1,000,001 minimal rows (issue: stored in 20 s)",
                     lambda: [(_tiny_rows(1_000_001, "rows-1"), GZ)]),
    "long-name": ("a 1 MB function name",
                  lambda: [(_batch(10, 2, 1, 2, "long-1", name_len=1 << 20), GZ)]),
    "bombs-x8": ("8 bombs at once, no Content-Encoding",
                 lambda: [(_tiny_rows(14_500_000, f"bomb-x{i}"), {}) for i in range(8)]),
    "largest-x4": ("4 at once of the largest batch the defaults accept "
                   "(49,999 samples + 1 process, 60-frame stacks: 3.4 M values)",
                   lambda: [(_batch(49_999, 60, 5_000, 10 + i, f"big-{i}-{time.time_ns()}"), GZ)
                            for i in range(4)]),
    "distinct-x3": ("3 at once of those, two sessions (all three writer threads busy)",
                    lambda: [(_distinct_stacks(50_000, 65, f"d3-{i}-{time.time_ns()}"),
                              {**GZ, SESSION: "other" if i == 2 else "hostile"})
                             for i in range(3)]),
    "distinct-x2": ("2 at once of 50,000 samples, each with its own 65-frame stack "
                    "(3.7 M values; accepted, the costliest to decode and intern)",
                    lambda: [(_distinct_stacks(50_000, 65, f"distinct-{i}-{time.time_ns()}"), GZ)
                             for i in range(2)]),
}


# -- the parent: measure ---------------------------------------------------------------------

def _post(port: int, body: bytes, headers: dict[str, str], session: str = "hostile") -> int:
    headers = dict(headers)
    session = headers.pop(SESSION, session)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        conn.request("POST", f"/v1/sessions/bench/{session}/batches", body=body,
                     headers={"Authorization": f"Bearer {TOKEN}", **headers})
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
        big = [_batch(49_999, 60, 5_000, 30 + r * 4 + i, f"fair-{r}-{i}-{time.time_ns()}")
               for i in range(4)]
    return waits


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
    return {"statuses": statuses, "elapsed_s": elapsed, "start_mb": start_kb / 1024,
            "peak_mb": _status_kb(pid, "VmHWM") / 1024,
            "after_mb": _status_kb(pid, "VmRSS") / 1024, "healthz_s": worst[0],
            "wire_kb": sum(len(b) for b, _ in bodies) / 1024,
            "json_mb": sum(len(gzip.decompress(b)) for b, _ in bodies) / 2**20}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsn", help="SQLAlchemy URL of an existing database")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--tree", type=Path, default=ROOT,
                   help="checkout whose kubeprof the server runs (default: this one)")
    p.add_argument("--serve", nargs=2, metavar=("DSN", "PORT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
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
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        str(tree / s) for s in ("agent", "operator", "src"))}
    child = subprocess.Popen([sys.executable, __file__, "--serve", url, str(port)], env=env,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        print(f"server: {tree} (pid {child.pid})")
        print("| case | on the wire | JSON inflated | answers | peak RSS MiB (start) | "
              "RSS after MiB | slowest /healthz s | wall s |")
        print("|---|---:|---:|---|---:|---:|---:|---:|")
        for name in args.cases.split(","):
            if name == "fairness":
                waits = fairness(port)
                print(f"\nanother session's 100-row batch during 4 x 50,000-row batches: "
                      f"{', '.join(f'{w:.2f}' for w in waits)} s (median "
                      f"{sorted(waits)[len(waits) // 2]:.2f} s)", flush=True)
                continue
            what, make = CASES[name]
            bodies = make()
            r = measure(child.pid, port, bodies)
            answers = ", ".join(f"{s}×{r['statuses'].count(s)}" if r["statuses"].count(s) > 1
                                else str(s) for s in sorted(set(r["statuses"])))
            print(f"| {what} | {r['wire_kb']:,.1f} KB | {r['json_mb']:,.1f} MiB | {answers} | "
                  f"{r['peak_mb']:,.0f} ({r['start_mb']:,.0f}) | {r['after_mb']:,.0f} | "
                  f"{r['healthz_s']:.2f} | {r['elapsed_s']:.1f} |", flush=True)
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
