"""A big session stored in PostgreSQL: `kubeprof report` (text, JSON) and the web UI's first
flame graph, timed end to end with each process's peak memory.

Usage: .venv/bin/python bench/report_big_session.py [--kernels 1000000] [--samples 10000000]
       [--threads 100] [--repeat 2] [--pg-url URL] [--keep]

The session is bench/analysis_scale.py's: a training loop of 50 kernels per step (10 names,
20 µs each, 5 µs gaps) with a 50 ms host step, and `threads` threads of the launching
process sampled at 99 Hz over the same span, 1,000 distinct stacks. The server makes its
rows itself (`write_session`: the rows `Store.write_batch` would store, in minutes rather
than hours at 10 M samples) in PostgreSQL 15: the --pg-url database, or a server started in
a temp folder.

Measured, each as a fresh process as a user runs it (Python start-up and loading from the
store included), wall time and the child's peak RSS (wait4):
  report text   kubeprof report --store URL SESSION --format text --out FILE
  report json   kubeprof report --store URL SESSION --format json --out FILE
  ui            kubeprof ui --store URL --listen 127.0.0.1:P: from the process's start until
                the session page's first flame graph is answered (the page's two requests as
                it sends them, at once: the summary, ?whole-session=1, and the flame graph,
                /flamegraph?view=cpu), and each request from when both were sent.

With --views (storage.prepared_views), each timed as above, in this order: the session's
stored views dropped; report text (computed, then stored), report json and text (read
back), ui (its whole-session view computed and stored), ui again (read back); the views
dropped again and stored by the operator's fill (`kubeprof.operator.view_fill.fill`, a child
process, timed the same way); then report text, json and ui read back. Stored body sizes too.

With --flame-rounds N --before DIR (another tree, e.g. main's from `git archive`): only the
UI, N rounds alternating that tree and this one: the session's views dropped, filled by the
tree's own operator code, then `kubeprof ui` started twice (`flame_rows`).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402

from kubeprof.model import (  # noqa: E402
    Batch,
    CpuSample,
    Frame,
    FrameKind,
    GpuActivity,
    Stack,
    stack_hash,
)
from kubeprof.storage import Store  # noqa: E402
from kubeprof.storage.stack_counts import BUCKET_NS  # noqa: E402

KUBEPROF = [sys.executable, "-m", "kubeprof.cli"]
PER_STEP, KERNEL_NS, GAP_NS, HOST_NS = 50, 20_000, 5_000, 50_000_000
HZ, PID, BATCH = 99, 4242, 50_000
T0 = 1_000_000_000


def session_shape() -> tuple[Stack, list[Stack], list[str]]:
    """The launch stack, the 1,000 CPU stacks and the 10 kernel names."""
    script = "/app/train.py"
    launch = (
        Frame("<module>", FrameKind.PYTHON, script, 90),
        Frame("train_step", FrameKind.PYTHON, script, 42),
        Frame("cudaLaunchKernel", FrameKind.CUDA_API),
    )
    root = Frame("<module>", FrameKind.PYTHON, script, 90)
    stacks = [
        (root, Frame(f"fn_{i}", FrameKind.PYTHON, f"/app/mod_{i % 37}.py", i)) for i in range(1000)
    ]
    return launch, stacks, [f"kernel_{i}" for i in range(10)]


def end_of(kernels: int) -> int:
    """The session's last timestamp: one kernel period after the last kernel's start."""
    return T0 + kernels * (KERNEL_NS + GAP_NS) + max(kernels - 1, 0) // PER_STEP * HOST_NS


def write_session_batches(url: str, kernels: int, samples: int, threads: int) -> str:
    """The session written through `Store.write_batch` (the path `kubeprof record` and the
    operator's ingest use): slow (about 1 M rows in 10 min here), kept to check that
    `write_session` stores the same rows."""
    launch, stacks, names = session_shape()
    store = Store.open(url)
    name = f"big-{time.time_ns()}"
    sid = store.create_session(name, hz=HZ, command="python /app/train.py")
    t = T0
    acts: list[GpuActivity] = []
    for i in range(kernels):
        if i and i % PER_STEP == 0:
            t += HOST_NS
        acts.append(
            GpuActivity("kernel", names[i % 10], t, t + KERNEL_NS, 0, PID, i, 7, stack=launch)
        )
        t += KERNEL_NS + GAP_NS
        if len(acts) == BATCH:
            store.write_batch(sid, Batch(gpu_activities=tuple(acts)))
            acts = []
    if acts:
        store.write_batch(sid, Batch(gpu_activities=tuple(acts)))
    per = samples // threads
    step = (end_of(kernels) - T0) // per
    for j0 in range(0, per, BATCH // threads):
        rows = tuple(
            CpuSample(
                T0 + k + j * step, PID, PID + k, f"worker-{k}", k % 2, stacks[(j * 7 + k) % 1000]
            )
            for j in range(j0, min(per, j0 + BATCH // threads))
            for k in range(threads)
        )
        store.write_batch(sid, Batch(samples=rows))
    store.finish_session(sid, end_ns=end_of(kernels))
    store.close()
    return name


def write_session(url: str, kernels: int, samples: int, threads: int) -> tuple[str, float]:
    """Write the session; returns its name and the seconds writing took.

    The same rows as `write_session_batches` (kernel i starts at T0 + i x 25 us + its step's
    host gaps; sample j of thread k at T0 + k + j x step with stack (7j + k) mod 1000), made
    by the server itself (generate_series) and the `stack_counts` rows counted from them in
    SQL, so 10 M samples take minutes instead of hours. Only the stacks are interned from
    Python, by the store's own interner."""
    launch, stacks, _ = session_shape()
    store = Store.open(url)
    name = f"big-{time.time_ns()}"
    sid = store.create_session(name, hz=HZ, command="python /app/train.py")
    t_write = time.perf_counter()
    with store.engine.begin() as conn:
        ids = store.interner.stack_ids_for(conn, [launch, *stacks])
    launch_id = ids[stack_hash(launch)]
    cpu_ids = [ids[stack_hash(s)] for s in stacks]
    per = samples // threads
    step = (end_of(kernels) - T0) // per if per else 0
    sql = [
        (
            "INSERT INTO gpu_activities (session_id, node, kind, name, demangled, start_ns,"
            " end_ns, device, pid, correlation_id, stream, grid_x, grid_y, grid_z, block_x,"
            " block_y, block_z, registers, shared_mem, bytes, stack_id)"
            " SELECT %(sid)s, '', 'kernel', 'kernel_' || (i %% 10), '', s, s + %(kns)s, 0,"
            " %(pid)s, i, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, %(launch)s FROM ("
            "  SELECT i, %(t0)s + i * %(period)s + (i / %(per_step)s) * %(host)s AS s"
            "  FROM generate_series(0::bigint, %(kernels)s - 1) AS i) AS k ORDER BY i"
        ),
        (
            "INSERT INTO samples (session_id, node, ts_ns, pid, tid, cpu, thread, stack_id)"
            " SELECT %(sid)s, '', %(t0)s + k + j * %(step)s, %(pid)s, %(pid)s + k, k %% 2,"
            " 'worker-' || k, (%(cpu_ids)s::bigint[])[(j * 7 + k) %% 1000 + 1]"
            " FROM generate_series(0::bigint, %(per)s - 1) AS j,"
            " generate_series(0::bigint, %(threads)s - 1) AS k ORDER BY j, k"
        ),
        (
            "INSERT INTO stack_counts (session_id, bucket, node, pid, tid, stack_id, thread,"
            " samples) SELECT session_id, b, node, pid, tid, stack_id, max(thread), count(*)"
            " FROM samples, LATERAL (VALUES (-1::bigint), (ts_ns / %(bucket)s)) AS v(b)"
            " WHERE session_id = %(sid)s GROUP BY session_id, b, node, pid, tid, stack_id"
        ),
        (  # every sample above is counted: the watermark readers add samples past
            "UPDATE sessions SET counted_sample_id ="
            " (SELECT COALESCE(max(id), 0) FROM samples WHERE session_id = %(sid)s)"
            " WHERE id = %(sid)s"
        ),
    ]
    args = {
        "sid": sid,
        "kns": KERNEL_NS,
        "pid": PID,
        "launch": launch_id,
        "t0": T0,
        "period": KERNEL_NS + GAP_NS,
        "per_step": PER_STEP,
        "host": HOST_NS,
        "kernels": kernels,
        "step": step,
        "cpu_ids": cpu_ids,
        "per": per,
        "threads": threads,
        "bucket": BUCKET_NS,
    }
    raw = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))
    with raw, raw.cursor() as cur:
        cur.execute("SET work_mem = '256MB'")
        for stmt in sql:
            cur.execute(stmt, args)
        cur.execute("ANALYZE")
    store.finish_session(sid, end_ns=end_of(kernels))
    store.close()
    return name, time.perf_counter() - t_write


# A small process between us and the measured one: a child started from this (big) process
# would report our peak RSS as its own (Linux keeps the pre-exec high-water mark), so this one
# forks the command from a few-MiB interpreter and prints the command's own peak.
_PEAK = """
import os, signal, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGTERM))
while True:
    try:
        _, status, usage = os.wait4(pid, 0)
        break
    except InterruptedError:
        continue
sys.stderr.write(f"\\nKP_PEAK_KIB={usage.ru_maxrss}\\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def peak_argv(argv: list[str]) -> list[str]:
    """argv run under the _PEAK helper."""
    return ["/usr/bin/python3", "-S", "-c", _PEAK, *argv]


def peak_of(output: str) -> int:
    """The peak RSS (KiB) the _PEAK helper printed."""
    return int(output.rsplit("KP_PEAK_KIB=", 1)[1].split()[0])


def run_child(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    """(wall s, peak RSS KiB) of one command run to its end (`env`: its environment)."""
    t0 = time.perf_counter()
    r = subprocess.run(
        peak_argv(argv), capture_output=True, text=True, cwd=REPO, check=False, env=env
    )
    wall = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"{argv} failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    return wall, peak_of(r.stderr)


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=600) as r:
        return r.read()


def time_ui(
    url: str, session: str, env: dict[str, str] | None = None
) -> tuple[float, float, float, int, bytes]:
    """(start to first flame graph, summary request, flame graph request) seconds, peak KiB
    and the flame graph's answer."""
    from tests.e2e.cluster.ports import pick

    port = pick(1)[0]
    base = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    p = subprocess.Popen(
        peak_argv([*KUBEPROF, "ui", "--store", url, "--listen", f"127.0.0.1:{port}"]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )
    try:
        while True:
            try:
                get(base + "/api/v1/sessions")
                break
            except OSError:
                if p.poll() is not None:
                    raise SystemExit("kubeprof ui exited") from None
                time.sleep(0.05)
        t1 = time.perf_counter()
        # as the page asks: the summary and the flame graph at once (app.js sessionPage)
        done: dict[str, tuple[float, bytes]] = {}

        def ask(what: str, path: str) -> None:
            body = get(base + path)
            done[what] = (time.perf_counter(), body)

        page = f"/api/v1/sessions/local/{session}"
        asks = [
            threading.Thread(target=ask, args=("summary", page + "?whole-session=1")),
            threading.Thread(target=ask, args=("flame", page + "/flamegraph?view=cpu")),
        ]
        for th in asks:
            th.start()
        for th in asks:
            th.join()
        (t_sum, _), (t_flame, body) = done["summary"], done["flame"]
        assert b"fn_" in body, body[:300]
    finally:
        p.terminate()
        _, err = p.communicate(timeout=60)
    return t_flame - t0, t_sum - t1, t_flame - t1, peak_of(err), body


FILL = (
    "import sys; from kubeprof.operator import view_fill; from kubeprof.storage import Store;"
    "s = Store.open(sys.argv[1]); assert view_fill.fill(s.engine, int(sys.argv[2]))"
)


def drop_views(url: str, session: str) -> int:
    """Delete the session's stored views and flame graphs; its id."""
    with psycopg.connect(url.replace("+psycopg", "")) as c:
        sid = c.execute("SELECT id FROM sessions WHERE name = %s", (session,)).fetchone()[0]
        c.execute("DELETE FROM prepared_views WHERE session_id = %s", (sid,))
        if c.execute("SELECT to_regclass('prepared_flames')").fetchone()[0] is not None:
            c.execute("DELETE FROM prepared_flames WHERE session_id = %s", (sid,))
    return int(sid)


def view_sizes(url: str, sid: int) -> str:
    with psycopg.connect(url.replace("+psycopg", "")) as c:
        got = c.execute(
            "SELECT options, octet_length(body), pg_column_size(body) FROM prepared_views "
            "WHERE session_id = %s ORDER BY options",
            (sid,),
        ).fetchall()
    return "; ".join(f"{o}: {n:,} bytes ({m:,} stored)" for o, n, m in got)


def report_row(url: str, session: str, fmt: str, out: Path, label: str) -> str:
    argv = [*KUBEPROF, "report", "--store", url, session, "--format", fmt]
    wall, rss = run_child([*argv, "--out", str(out / f"r.{fmt}")])
    size = (out / f"r.{fmt}").stat().st_size
    return f"| report {fmt}, {label} | {wall:.2f} | | | {rss / 1024:.0f} | {size:,} bytes |"


def ui_row(url: str, session: str, label: str) -> str:
    first, summ, flame, rss, _ = time_ui(url, session)
    times = f"{first:.2f} | {summ:.2f} | {flame:.2f}"
    return f"| ui first flame graph, {label} | {times} | {rss / 1024:.0f} | |"


def views_rows(url: str, session: str, out: Path) -> list[str]:
    """The --views sequence (module docstring); one table row each, printed as it goes."""
    rows: list[str] = []

    def add(row: str) -> None:
        rows.append(row)
        print(row, flush=True)

    sid = drop_views(url, session)
    add(report_row(url, session, "text", out, "computed + stored"))
    add(report_row(url, session, "json", out, "read back"))
    add(report_row(url, session, "text", out, "read back"))
    add(ui_row(url, session, "whole-session view computed + stored"))
    add(ui_row(url, session, "read back"))
    drop_views(url, session)
    wall, rss = run_child([sys.executable, "-c", FILL, url, str(sid)])
    add(f"| operator fill (both views, one computation) | {wall:.2f} | | | {rss / 1024:.0f} | |")
    add(report_row(url, session, "text", out, "after the operator's fill"))
    add(report_row(url, session, "json", out, "after the operator's fill"))
    add(ui_row(url, session, "after the operator's fill"))
    print("stored:", view_sizes(url, sid), flush=True)
    return rows


def tree_env(tree: Path) -> dict[str, str]:
    """The environment that runs kubeprof from another tree (its src, operator and agent
    first on PYTHONPATH), e.g. main's as a `git archive` folder."""
    paths = [str(tree / d) for d in ("src", "operator", "agent")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


HEAD = (
    "from alembic.script import ScriptDirectory; from kubeprof.storage import migrate;"
    "print(ScriptDirectory.from_config(migrate.alembic_config()).get_current_head())"
)


def schema_for(url: str, env: dict[str, str]) -> None:
    """The database's schema taken down to the newest migration the tree of `env` knows
    (an older kubeprof refuses a newer schema); this tree's code upgrades it again."""
    from kubeprof.storage import migrate

    head = subprocess.run(
        [sys.executable, "-c", HEAD], capture_output=True, text=True, env=env, check=True
    ).stdout.strip()
    store = Store.open(url)
    try:
        with store.engine.begin() as conn:
            migrate.downgrade(conn, head)
    finally:
        store.close()


def flame_rows(url: str, session: str, rounds: int, before: Path) -> list[str]:
    """--flame-rounds with --before: the web UI's first flame graph after the operator's
    fill, the tree at `before` and this one alternating (before first in odd rounds), each
    filling its own views (the code fingerprints differ; the schema taken down to what the
    other tree knows first) and then started twice; the two trees' flame graph answers
    compared byte for byte."""
    rows: list[str] = []
    bodies: dict[str, bytes] = {}
    for r in range(rounds):
        for which in ("before", "after") if r % 2 == 0 else ("after", "before"):
            env = tree_env(before) if which == "before" else None
            sid = drop_views(url, session)
            if env is not None:
                schema_for(url, env)
            fill = run_child([sys.executable, "-c", FILL, url, str(sid)], env)
            for k in (1, 2):
                load = os.getloadavg()[0]
                first, summ, flame, rss, body = time_ui(url, session, env)
                assert bodies.setdefault(which, body) == body, which
                rows.append(
                    f"| {r + 1} | {which} | {k} | {load:.1f} | {first:.2f} | {summ:.2f} | "
                    f"{flame:.2f} | {rss / 1024:.0f} | {fill[0]:.1f} / {fill[1] / 1024:.0f} |"
                )
                print(rows[-1], flush=True)
    same = bodies["before"] == bodies["after"]
    print(f"flame graph answers byte-identical: {same} ({len(bodies['after']):,} bytes)")
    print(
        "| round | tree | ui start | load | start to first flame graph s | summary request s"
        " | flame graph request s | peak RSS MiB | fill s / MiB |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--threads", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--pg-url", default="", help="an existing PostgreSQL database to use")
    ap.add_argument("--session", default="", help="a session already written (skips writing)")
    ap.add_argument("--keep", action="store_true", help="leave the temp server running")
    ap.add_argument("--views", action="store_true", help="time stored views (docstring)")
    ap.add_argument(
        "--flame-rounds", type=int, default=0, help="with --before: the UI's first flame graph"
    )
    ap.add_argument("--before", type=Path, help="another tree to alternate with (docstring)")
    args = ap.parse_args()
    if args.flame_rounds and args.before is None:
        ap.error("--flame-rounds needs --before DIR (e.g. main's tree from `git archive`)")
    pg = None
    url = args.pg_url
    if not url:
        from tests.e2e.cluster.postgres import Postgres

        d = Path(tempfile.mkdtemp(prefix="kp-big-session-"))
        d.chmod(0o711)  # the server runs as user postgres
        pg = Postgres(d / "pg").start()
        url = pg.url
        print(f"PostgreSQL 15 in {d}: {url}", flush=True)
    try:
        session = args.session
        what = f"session {session}"
        if not session:
            session, write_s = write_session(url, args.kernels, args.samples, args.threads)
            what = f"{args.kernels:,} kernels, {args.samples:,} CPU samples"
            print(f"wrote {session}: {what} in {write_s:.0f} s", flush=True)
        if args.flame_rounds:
            print("\n".join(flame_rows(url, session, args.flame_rounds, args.before)))
            return
        out = Path(tempfile.mkdtemp(prefix="kp-big-report-"))
        rows = []
        for _ in range(args.repeat if args.views else 0):
            rows += views_rows(url, session, out)
        for r in range(0 if args.views else args.repeat):
            for fmt in ("text", "json"):
                wall, rss = run_child(
                    [
                        *KUBEPROF,
                        "report",
                        "--store",
                        url,
                        session,
                        "--format",
                        fmt,
                        "--out",
                        str(out / f"r.{fmt}"),
                    ]
                )
                size = (out / f"r.{fmt}").stat().st_size
                rows.append(
                    f"| report {fmt} | {r + 1} | {wall:.2f} | | | {rss / 1024:.0f} |"
                    f" {size:,} bytes |"
                )
                print(rows[-1], flush=True)
            first, summ, flame, rss, _ = time_ui(url, session)
            rows.append(
                f"| ui first flame graph | {r + 1} | {first:.2f} | {summ:.2f} | "
                f"{flame:.2f} | {rss / 1024:.0f} | |"
            )
            print(rows[-1], flush=True)
        shutil.rmtree(out, ignore_errors=True)
        load = os.getloadavg()
        print(
            f"\n{what}; load average "
            f"{load[0]:.1f} at the end; bench peak RSS "
            f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
        )
        run = "" if args.views else " run |"
        print(
            f"| what |{run} wall s | summary request s | flame graph request s "
            "| peak RSS MiB | output |"
        )
        print("|---|" + ("---:|" if run else "") + "---:|---:|---:|---:|---|")
        print("\n".join(rows))
    finally:
        if pg is not None and not args.keep:
            pg.stop()
            shutil.rmtree(pg.dir.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
