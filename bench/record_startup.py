"""`kubeprof record` start-up: whole-command wall time and the first sample, beside bare.

    sudo .venv/bin/python bench/record_startup.py [--rounds 5] [--seconds 3]

One CPU-bound Python program (it spins for ``--seconds`` of wall time and prints the
CLOCK_MONOTONIC instant of its first line) runs, alternating in every round:
- bare;
- ``kubeprof record`` (default: the quick start, py-spy sampling while the BPF sampler
  compiles, agent/kubeprof/agent/cpu/handover.py);
- ``kubeprof record`` with ``KUBEPROF_CPU_SOURCE=bpf`` (the command waits for the compile:
  the behaviour before the quick start);
- ``py-spy record`` (no kubeprof).
Per run: the wall time of the whole command (what a user waits for), and for kubeprof the
first stored sample's time after the program's first line (negative: sampled while the
interpreter was still starting), and which sampler covered how much. Medians over rounds
and the ratio to bare's median; every run is listed with ``--all``.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KUBEPROF = Path(sys.executable).parent / "kubeprof"

PROGRAM = r"""
import sys, time
print("KUBEPROF_BENCH_START", time.monotonic_ns(), flush=True)
end, n = time.perf_counter() + float(sys.argv[1]), 0
while time.perf_counter() < end:
    n += sum(i * i for i in range(100))
"""


def _first_line_ns(stdout: str) -> int | None:
    for line in stdout.splitlines():
        if line.startswith("KUBEPROF_BENCH_START"):
            return int(line.split()[1])
    return None


def _store_facts(db: Path) -> dict:
    """First on-CPU sample time, sample count and the session's sampler meta."""
    with sqlite3.connect(db) as conn:
        first, n = conn.execute("SELECT min(ts_ns), count(*) FROM samples").fetchone()
        meta = json.loads(conn.execute("SELECT meta FROM sessions").fetchone()[0] or "{}")
    return {"first_ns": first, "samples": n, "meta": meta}


def run_once(mode: str, prog: Path, seconds: float, tmp: Path, i: int) -> dict:
    cmd = [sys.executable, str(prog), str(seconds)]
    env = dict(os.environ)
    db = tmp / f"{mode}-{i}.db"
    if mode.startswith("kubeprof"):
        cmd = [str(KUBEPROF), "record", "--store", f"sqlite:///{db}", "--", *cmd]
        if mode == "kubeprof-wait-bpf":
            env["KUBEPROF_CPU_SOURCE"] = "bpf"
        else:
            env.pop("KUBEPROF_CPU_SOURCE", None)
    elif mode == "py-spy":
        out = tmp / f"pyspy-{i}.txt"
        cmd = [
            str(KUBEPROF.parent / "py-spy"),
            "record",
            "-r",
            "99",
            "-f",
            "raw",
            "-o",
            str(out),
            "--",
            *cmd,
        ]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    wall = time.perf_counter() - t0
    row = {"mode": mode, "wall_s": wall}
    start = _first_line_ns(done.stdout)
    if mode.startswith("kubeprof") and start is not None:
        facts = _store_facts(db)
        row["first_sample_s"] = (facts["first_ns"] - start) / 1e9 if facts["first_ns"] else None
        row["samples"] = facts["samples"]
        row["sampler"] = facts["meta"].get("cpu_source", "")
        row["handover_s"] = facts["meta"].get("cpu_handover_s", "")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--all", action="store_true", help="list every run")
    args = ap.parse_args()
    modes = ["bare", "kubeprof", "kubeprof-wait-bpf", "py-spy"]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="kubeprof-startup-") as d:
        tmp = Path(d)
        prog = tmp / "spin.py"
        prog.write_text(PROGRAM)
        for i in range(args.rounds):
            for mode in modes:
                rows.append(run_once(mode, prog, args.seconds, tmp, i))
    bare = statistics.median(r["wall_s"] for r in rows if r["mode"] == "bare")
    print(
        f"{args.rounds} rounds, {args.seconds:g} s program, load average "
        f"{os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs"
    )
    print(
        "| run | wall, median (min-max) | × bare | first sample after the program's "
        "first line, median (max) | samples | sampler |"
    )
    print("|---|---|---|---|---|---|")
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        walls = [r["wall_s"] for r in mine]
        firsts = [r["first_sample_s"] for r in mine if r.get("first_sample_s") is not None]
        first = f"{statistics.median(firsts):+.3f} s ({max(firsts):+.3f} s)" if firsts else "–"
        samples = statistics.median(r["samples"] for r in mine) if "samples" in mine[0] else "–"
        sampler = (
            ", ".join(
                sorted(
                    {
                        r["sampler"]
                        + (f" after py-spy {r['handover_s']} s" if r.get("handover_s") else "")
                        for r in mine
                        if r.get("sampler")
                    }
                )
            )
            or "–"
        )
        print(
            f"| {mode} | {statistics.median(walls):.2f} s ({min(walls):.2f}-{max(walls):.2f})"
            f" | {statistics.median(walls) / bare:.2f} | {first} | {samples} | {sampler} |"
        )
    if args.all:
        for r in rows:
            print(json.dumps(r))


if __name__ == "__main__":
    main()
