"""A big session stored in PostgreSQL: `kubeprof report` (text, JSON) and the web UI's first
flame graph, timed end to end with each process's peak memory.

Usage: .venv/bin/python bench/report_big_session.py [--kernels 1000000] [--samples 10000000]
       [--threads 100] [--repeat 2] [--pg-url URL] [--keep]

The session is bench/analysis_scale.py's: a training loop of 50 kernels per step (10 names,
20 µs each, 5 µs gaps) with a 50 ms host step, and `threads` threads of the launching
process sampled at 99 Hz over the same span, 1,000 distinct stacks. It is written through
`Store.write_batch` (the path `kubeprof record` and the operator's ingest use) into
PostgreSQL 15: the --pg-url database, or a server started in a temp folder.

Measured, each as a fresh process as a user runs it (Python start-up and loading from the
store included), wall time and the child's peak RSS (wait4):
  report text   kubeprof report --store URL SESSION --format text --out FILE
  report json   kubeprof report --store URL SESSION --format json --out FILE
  ui            kubeprof ui --store URL --listen 127.0.0.1:P: from the process's start until
                the session page's first flame graph is answered (the page's two requests in
                its order: the summary, then /flamegraph?view=cpu), and the two alone.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kubeprof.model import Batch, CpuSample, Frame, FrameKind, GpuActivity  # noqa: E402
from kubeprof.storage import Store  # noqa: E402

KUBEPROF = [sys.executable, "-m", "kubeprof.cli"]
PER_STEP, KERNEL_NS, GAP_NS, HOST_NS = 50, 20_000, 5_000, 50_000_000
HZ, PID, BATCH = 99, 4242, 50_000


def write_session(url: str, kernels: int, samples: int, threads: int) -> tuple[str, float]:
    """Write the session; returns its name and the seconds writing took."""
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
    names = [f"kernel_{i}" for i in range(10)]
    store = Store.open(url)
    name = f"big-{time.time_ns()}"
    sid = store.create_session(name, hz=HZ, command="python /app/train.py")
    t_write = time.perf_counter()
    t0 = t = 1_000_000_000
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
    t1 = t
    per = samples // threads
    step = (t1 - t0) // per
    for j0 in range(0, per, BATCH // threads):
        rows = tuple(
            CpuSample(
                t0 + k + j * step, PID, PID + k, f"worker-{k}", k % 2, stacks[(j * 7 + k) % 1000]
            )
            for j in range(j0, min(per, j0 + BATCH // threads))
            for k in range(threads)
        )
        store.write_batch(sid, Batch(samples=rows))
    store.finish_session(sid, end_ns=t1)
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


def run_child(argv: list[str]) -> tuple[float, int]:
    """(wall s, peak RSS KiB) of one command run to its end."""
    t0 = time.perf_counter()
    r = subprocess.run(peak_argv(argv), capture_output=True, text=True, cwd=REPO, check=False)
    wall = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"{argv} failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    return wall, peak_of(r.stderr)


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=600) as r:
        return r.read()


def time_ui(url: str, session: str) -> tuple[float, float, float, int]:
    """(start to first flame graph, summary request, flame graph request) seconds, peak KiB."""
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
        get(f"{base}/api/v1/sessions/local/{session}")
        t2 = time.perf_counter()
        body = get(f"{base}/api/v1/sessions/local/{session}/flamegraph?view=cpu")
        t3 = time.perf_counter()
        assert b"fn_" in body, body[:300]
    finally:
        p.terminate()
        _, err = p.communicate(timeout=60)
    return t3 - t0, t2 - t1, t3 - t2, peak_of(err)


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
    args = ap.parse_args()
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
        out = Path(tempfile.mkdtemp(prefix="kp-big-report-"))
        rows = []
        for r in range(args.repeat):
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
            first, summ, flame, rss = time_ui(url, session)
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
        print(
            "| what | run | wall s | summary request s | flame graph request s "
            "| peak RSS MiB | output |"
        )
        print("|---|---:|---:|---:|---:|---:|---|")
        print("\n".join(rows))
    finally:
        if pg is not None and not args.keep:
            pg.stop()
            shutil.rmtree(pg.dir.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
