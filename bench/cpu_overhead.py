"""Overhead of the CPU collector (BPF Python unwinder) at 99 Hz, side by side with py-spy.

    sudo .venv/bin/python bench/cpu_overhead.py [--rounds 6] [--hz 99]
    sudo .venv/bin/python bench/cpu_overhead.py --replay [--passes 5] [--no-recheck]
    sudo .venv/bin/python bench/cpu_overhead.py --phases [--rounds 3] [--py-iters N]

Fixed-work workloads (a CPU-bound Python loop on Debian's CPython 3.11 and on pyenv's
3.11 build, a CPU-bound C loop) run in alternating rounds: bare, under `CpuCollector`
(Python frames walked in BPF, native frames unwound in user space from the copied
stack), and (Python only: py-spy cannot read a native process) under
`py-spy record --nonblocking` at the same rate. Per run it measures the workload's own
CPU time (rusage of the reaped child), its wall time, the profiler's user-space CPU
(this process's rusage delta for the collector, or the reaped py-spy child, minus the
workload), and the BPF program's run time from `kernel.bpf_stats_enabled` + bpftool,
which the kernel charges to the sampled task, not to the profiler. The profiler's cost
per sampled CPU-second is (user-space CPU + BPF run time) / workload CPU. One collector
is built once (its clang start-up is reported apart) and reused across runs; its BPF
program therefore also fires, filtered out at once, during the bare and py-spy runs.
Prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kubeprof.agent.cpu.collector import CpuCollector
from kubeprof.agent.cpu.python_stacks import pyspy_path

ROOT = Path(__file__).resolve().parent.parent
PY_WORK = "n=0\nfor i in range({iters}):\n    n += i * i % 7\n"
C_WORK = r"""
#include <stdlib.h>
volatile unsigned long sink;
int main(int argc, char **argv) {
    unsigned long n = strtoul(argv[1], 0, 10), x = 0;
    for (unsigned long i = 0; i < n; i++) x += (i * i) % 7;
    sink = x;
    return 0;
}
"""


def cpu_s(ru: resource.struct_rusage) -> float:
    return ru.ru_utime + ru.ru_stime


def self_and_children() -> float:
    return cpu_s(resource.getrusage(resource.RUSAGE_SELF)) + cpu_s(
        resource.getrusage(resource.RUSAGE_CHILDREN)
    )


PROG_IDS: set[int] = set()  # this bench's own programs: other processes may run samplers


def own_prog_ids(collector: CpuCollector) -> set[int]:
    """Kernel ids of the collector's perf-event program, from its fd's fdinfo."""
    fd = collector._sampler._bpf.funcs[b"on_cpu_clock"].fd  # type: ignore[union-attr]
    with open(f"/proc/self/fdinfo/{fd}") as f:
        return {int(line.split()[1]) for line in f if line.startswith("prog_id:")}


def bpf_prog_stats() -> tuple[int, int]:
    """(run_time_ns, run_cnt) of this bench's perf-event programs."""
    try:
        out = subprocess.run(
            ["bpftool", "prog", "show", "--json"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return 0, 0
    progs = [p for p in json.loads(out) if p.get("id") in PROG_IDS]
    return sum(p.get("run_time_ns", 0) for p in progs), sum(p.get("run_cnt", 0) for p in progs)


def run_once(cmd: list[str], mode: str, collectors: dict[str, CpuCollector], hz: int) -> dict:
    """One workload run; mode is bare, py-spy or kubeprof."""
    collector = collectors.get(mode)
    bpf0 = bpf_prog_stats() if collector else (0, 0)  # bpftool's CPU stays outside
    before = self_and_children()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd)
    spy = None
    samples = 0
    if collector is not None:
        collector.add_target(proc.pid)
    elif mode == "py-spy":
        spy = subprocess.Popen(
            [
                pyspy_path() or "py-spy",
                "record",
                "--pid",
                str(proc.pid),
                "--rate",
                str(hz),
                "--nonblocking",
                "--format",
                "raw",
                "-o",
                os.devnull,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if collector is not None:
            samples += len(collector.poll().samples)
        time.sleep(0.05 if collector is None else 0.5)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if spy is not None:
        spy.wait()
    if collector is not None:
        samples += len(collector.poll().samples)  # nothing is held back: one last drain
    work = cpu_s(ru)
    profiler = self_and_children() - before - work
    bpf1 = bpf_prog_stats() if collector else (0, 0)
    return {
        "mode": mode,
        "work_cpu": work,
        "wall": wall,
        "profiler_cpu": max(profiler, 0.0),
        "bpf_ns": bpf1[0] - bpf0[0],
        "bpf_cnt": bpf1[1] - bpf0[1],
        "samples": samples,
    }


def med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def overhead(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="kubeprof-bench-"))
    (tmp / "loop.c").write_text(C_WORK)
    subprocess.run(["gcc", "-O1", "-o", str(tmp / "loop"), str(tmp / "loop.c")], check=True)
    workloads = {
        "python (Debian 3.11)": (
            ["/usr/bin/python3.11", "-c", PY_WORK.format(iters=args.py_iters)],
            ["bare", "kubeprof", "py-spy"],
        ),
        "native": ([str(tmp / "loop"), str(args.c_iters)], ["bare", "kubeprof"]),
    }
    pyenv = Path("/root/.pyenv/versions/3.11.7/bin/python3.11")
    if pyenv.exists():
        workloads["python (pyenv 3.11)"] = (
            [str(pyenv), "-c", PY_WORK.format(iters=args.py_iters)],
            ["bare", "kubeprof", "py-spy"],
        )
    subprocess.run(["sysctl", "-q", "-w", "kernel.bpf_stats_enabled=1"], check=False)
    c0, t0 = self_and_children(), time.monotonic()
    collectors = {"kubeprof": CpuCollector(hz=args.hz)}
    PROG_IDS.update(own_prog_ids(collectors["kubeprof"]))
    startup_cpu, startup_wall = self_and_children() - c0, time.monotonic() - t0
    rows: dict[str, list[dict]] = {w: [] for w in workloads}
    try:
        for r in range(args.rounds):
            for name, (cmd, modes) in workloads.items():
                order = modes if r % 2 == 0 else list(reversed(modes))  # alternate order
                for mode in order:
                    rows[name].append(run_once(cmd, mode, collectors, args.hz))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        for c in collectors.values():
            c.stop()
        subprocess.run(["sysctl", "-q", "-w", "kernel.bpf_stats_enabled=0"], check=False)
        shutil.rmtree(tmp, ignore_errors=True)

    print(
        f"\n{args.rounds} alternating rounds per mode, {args.hz} Hz, "
        f"{os.cpu_count()} CPUs; medians.\n"
    )
    print(
        "| workload | profiler | workload CPU s | vs bare | wall s | vs bare "
        "| profiler user CPU s | BPF CPU s | profiler CPU per sampled CPU-s | BPF µs/sample "
        "| samples |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, rs in rows.items():
        bare = [x for x in rs if x["mode"] == "bare"]
        for mode in workloads[name][1]:
            m = [x for x in rs if x["mode"] == mode]
            wc, wall, pc = med(m, "work_cpu"), med(m, "wall"), med(m, "profiler_cpu")
            ours = mode == "kubeprof"
            bpf_s = med(m, "bpf_ns") / 1e9 if ours else 0.0
            bpf = f"{med(m, 'bpf_ns') / max(med(m, 'bpf_cnt'), 1) / 1000:.1f}" if ours else "–"
            per = (pc + bpf_s) / wc if mode != "bare" else 0.0
            print(
                f"| {name} | {mode} | {wc:.3f} | {wc / med(bare, 'work_cpu'):.3f} | "
                f"{wall:.3f} | {wall / med(bare, 'wall'):.3f} | "
                f"{pc if mode != 'bare' else 0:.3f} | {bpf_s:.4f} | {per * 100:.2f} % | {bpf} | "
                f"{int(med(m, 'samples')) if ours else '–'} |"
            )
    print(
        f"\nCollector start-up (BPF compile + attach, once): {startup_cpu:.2f} CPU-s, "
        f"{startup_wall:.2f} s wall."
    )
    allbpf = [x for rs in rows.values() for x in rs if x["mode"] == "kubeprof"]
    ns, cnt = sum(x["bpf_ns"] for x in allbpf), sum(x["bpf_cnt"] for x in allbpf)
    print(
        f"BPF program over all collector runs: {cnt} runs (all CPUs, target or not), "
        f"{ns / max(cnt, 1) / 1000:.2f} µs per run, "
        f"{ns / 1e9 / sum(x['work_cpu'] for x in allbpf) * 100:.3f} % of sampled CPU time."
    )


POLL_RECORDS = 50  # records one 0.5 s poll of one thread holds at 99 Hz


def replay(args: argparse.Namespace) -> None:
    """User-space µs per sample in steady state: records of a run, processed again.

    The load of a shared machine inflates per-run CPU figures; this isolates the
    collector's per-sample work (unwind, names, Python frames, interleave) from start-up
    and from other processes: records of one run are kept, then processed `--passes`
    times with the per-address caches warm (as in a long recording) and the per-stack
    cache cleared before each pass.
    """
    tmp = Path(tempfile.mkdtemp(prefix="kubeprof-bench-"))
    (tmp / "loop.c").write_text(C_WORK)
    subprocess.run(["gcc", "-O1", "-o", str(tmp / "loop"), str(tmp / "loop.c")], check=True)
    targets = {
        "python (Debian 3.11)": ["/usr/bin/python3.11", "-c", PY_WORK.format(iters=args.py_iters)],
        "callback tree (Debian 3.11)": [
            "/usr/bin/python3.11",
            str(ROOT / "tests/fixtures/cpu/callback_tree.py"),
            "2",
            os.devnull,
        ],
        "native": [str(tmp / "loop"), str(args.c_iters // 2)],
    }
    pyenv = "/root/.pyenv/versions/3.11.7/bin/python3.11"
    if Path(pyenv).exists():
        targets["python (pyenv 3.11)"] = [pyenv, "-c", PY_WORK.format(iters=args.py_iters)]
    c = CpuCollector(hz=args.hz)
    sampler = c._sampler
    assert sampler is not None
    print("| workload | samples | frames per sample | user-space µs per sample | at 99 Hz |")
    print("|---|---|---|---|---|")
    for name, cmd in targets.items():
        proc = subprocess.Popen(cmd)
        c.add_target(proc.pid)
        recs = []
        while proc.poll() is None:
            time.sleep(0.5)
            new = sampler.drain()
            for r in new:
                c._sample(r)  # first sight: names, rules, code objects read while it lives
            recs += new
        recs += sampler.drain()
        t0 = time.process_time()
        frames = 0
        for _ in range(args.passes):
            c._native_cache.clear()  # and the other per-stack caches: unwind memo, Python
            c._memos.clear()
            c._py_cache.clear()
            c._stack_cache.clear()
            for i in range(0, len(recs), POLL_RECORDS):
                poll = recs[i : i + POLL_RECORDS]
                if not args.no_recheck:  # as poll() does before naming its records
                    c._recheck_codes(poll)
                for r in poll:
                    frames += len(c._sample(r).stack)
        per = (time.process_time() - t0) / (args.passes * len(recs))
        print(
            f"| {name} | {len(recs)} | {frames / (args.passes * len(recs)):.0f} "
            f"| {per * 1e6:.0f} | {per * args.hz * 100:.2f} % |"
        )
    c.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def phases(args: argparse.Namespace) -> None:
    """Where the collector's user-space CPU goes, per phase, over whole runs.

    One collector profiles `--rounds` successive runs of the Debian CPython loop; each of
    its phases (drain and decode of the ring buffer, symbolization, start of a target) is
    wrapped with a process-CPU timer. The first run also pays the
    collector's one-time reads (/proc/kallsyms, each binary's symbols and .eh_frame).
    """
    c = CpuCollector(hz=args.hz)
    acc: dict[str, float] = {}

    def timed(obj: object, name: str, key: str) -> None:
        inner = getattr(obj, name)

        def wrapper(*a: object, **k: object) -> object:
            t0 = time.process_time()
            try:
                return inner(*a, **k)
            finally:
                acc[key] = acc.get(key, 0.0) + time.process_time() - t0

        setattr(obj, name, wrapper)

    timed(c._sampler, "drain", "drain + decode")
    timed(c, "_ingest", "symbolize")
    timed(c, "add_target", "start of target")
    cmd = ["/usr/bin/python3.11", "-c", PY_WORK.format(iters=args.py_iters)]
    print(
        "| run | samples | collector CPU per sampled CPU-s | µs per sample: drain + decode "
        "| symbolize | other | start of target, ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for run in range(1, args.rounds + 1):
        acc.clear()
        proc = subprocess.Popen(cmd)
        t0 = time.process_time()
        c.add_target(proc.pid)
        n = 0
        while True:
            pid, _, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            n += len(c.poll().samples)
            time.sleep(0.5)
        n += len(c.poll().samples)
        total = time.process_time() - t0
        start = acc.get("start of target", 0.0)
        drain, sym = acc.get("drain + decode", 0.0), acc.get("symbolize", 0.0)
        other = total - drain - sym - start  # exec checks, batches, the poll loop
        print(
            f"| {run} | {n} | {total / cpu_s(ru) * 100:.2f} % | {drain / n * 1e6:.0f} "
            f"| {sym / n * 1e6:.0f} | {other / n * 1e6:.0f} | {start * 1e3:.1f} |"
        )
    c.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--hz", type=int, default=99)
    ap.add_argument("--py-iters", type=int, default=20_000_000)
    ap.add_argument("--c-iters", type=int, default=2_000_000_000)
    ap.add_argument("--replay", action="store_true", help="steady-state µs per sample")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument(
        "--no-recheck",
        action="store_true",
        help="--replay without the per-poll code-object recheck (to see its cost)",
    )
    ap.add_argument("--phases", action="store_true", help="collector CPU per phase")
    args = ap.parse_args()
    (replay if args.replay else phases if args.phases else overhead)(args)


if __name__ == "__main__":
    main()
