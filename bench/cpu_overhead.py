"""Overhead of the CPU collector at 99 Hz vs py-spy alone, and the Python join accuracy.

    sudo .venv/bin/python bench/cpu_overhead.py [--rounds 6] [--hz 99]
    sudo .venv/bin/python bench/cpu_overhead.py --join-accuracy [--seconds 20]

Overhead: fixed-work workloads (a CPU-bound Python loop, a CPU-bound C loop) run in
alternating rounds: bare, under `CpuCollector`, and (Python only: py-spy cannot read a
native process) under `py-spy record --nonblocking` at the same rate and under
`CpuCollector(pyspy_native=True)` (py-spy --native, which pauses the target). Per run it
measures the workload's own CPU time (rusage of the reaped child), its wall time, and
the profiler's CPU (this process's rusage delta for the collector's Python side, plus
reaped py-spy children, minus the workload), and the BPF program's run time from
`kernel.bpf_stats_enabled` + bpftool. One collector is built once (its ~2-3 s clang
start-up is reported apart) and reused across runs; its BPF program therefore also
fires, filtered out at once, during the bare runs. Prints markdown tables.

Join accuracy: a program alternates a pure-Python phase with a sha256 phase at random
lengths; a sample whose kernel-walked leaf is in libcrypto/_hashlib is truly in the
native phase, one whose leaf is in the interpreter is in the Python phase; the joined
Python stack should name the same phase.
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
from kubeprof.model import FrameKind

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


def bpf_prog_stats() -> tuple[int, int]:
    """(run_time_ns, run_cnt) summed over loaded programs named on_cpu_clock."""
    try:
        out = subprocess.run(
            ["bpftool", "prog", "show", "--json"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return 0, 0
    progs = [p for p in json.loads(out) if p.get("name") == "on_cpu_clock"]
    return sum(p.get("run_time_ns", 0) for p in progs), sum(p.get("run_cnt", 0) for p in progs)


def run_once(cmd: list[str], mode: str, collectors: dict[str, CpuCollector], hz: int) -> dict:
    """One workload run; mode is bare, py-spy, kubeprof or kubeprof+native."""
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
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:  # let py-spy's last segment land
            b = collector.poll()
            samples += len(b.samples)
            if not collector._held:
                break
            time.sleep(0.2)
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
        "python": (
            [sys.executable, "-c", PY_WORK.format(iters=args.py_iters)],
            ["bare", "kubeprof", "py-spy", "kubeprof+native"],
        ),
        "native": ([str(tmp / "loop"), str(args.c_iters)], ["bare", "kubeprof"]),
    }
    subprocess.run(["sysctl", "-q", "-w", "kernel.bpf_stats_enabled=1"], check=False)
    c0, t0 = self_and_children(), time.monotonic()
    collectors = {"kubeprof": CpuCollector(hz=args.hz)}
    startup_cpu, startup_wall = self_and_children() - c0, time.monotonic() - t0
    collectors["kubeprof+native"] = CpuCollector(hz=args.hz, pyspy_native=True)
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
        "| profiler CPU s | profiler CPU per sampled CPU-s | BPF µs/sample | samples |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, rs in rows.items():
        bare = [x for x in rs if x["mode"] == "bare"]
        for mode in workloads[name][1]:
            m = [x for x in rs if x["mode"] == mode]
            wc, wall, pc = med(m, "work_cpu"), med(m, "wall"), med(m, "profiler_cpu")
            bpf = (
                f"{med(m, 'bpf_ns') / max(med(m, 'bpf_cnt'), 1) / 1000:.1f}"
                if mode.startswith("kubeprof")
                else "–"
            )
            per = pc / wc if mode != "bare" else 0.0
            print(
                f"| {name} | {mode} | {wc:.3f} | {wc / med(bare, 'work_cpu'):.3f} | "
                f"{wall:.3f} | {wall / med(bare, 'wall'):.3f} | "
                f"{pc if mode != 'bare' else 0:.3f} | {per * 100:.2f} % | {bpf} | "
                f"{int(med(m, 'samples')) if mode.startswith('kubeprof') else '–'} |"
            )
    print(
        f"\nCollector start-up (BPF compile + attach, once): {startup_cpu:.2f} CPU-s, "
        f"{startup_wall:.2f} s wall."
    )
    allbpf = [x for rs in rows.values() for x in rs if x["mode"].startswith("kubeprof")]
    ns, cnt = sum(x["bpf_ns"] for x in allbpf), sum(x["bpf_cnt"] for x in allbpf)
    print(
        f"BPF program over all collector runs: {cnt} runs (all CPUs, target or not), "
        f"{ns / max(cnt, 1) / 1000:.2f} µs per run, "
        f"{ns / 1e9 / sum(x['work_cpu'] for x in allbpf) * 100:.3f} % of sampled CPU time."
    )


def _phase_truth(samples: list) -> list[tuple[int, int, str]]:
    """(ts, tid, phase) from each sample's kernel-walked native leaf."""
    out = []
    for s in samples:
        natives = [f for f in s.stack if f.kind is FrameKind.NATIVE]
        if not natives:
            continue
        leaf = natives[-1].file
        if "crypto" in leaf or "_hashlib" in leaf:
            out.append((s.ts_ns, s.tid, "native"))
        elif leaf.rsplit("/", 1)[-1].startswith("python"):
            out.append((s.ts_ns, s.tid, "python"))
    return out


def _agreement(unwinder, truth: list, shift_ns: int) -> tuple[int, int]:
    judged = agree = 0
    for ts, tid, phase in truth:
        py = unwinder.stack_at(tid, ts + shift_ns, unwinder.period_ns)
        names = [f.name for f in py or ()]
        said = "native" if "native_phase" in names else "python" if "python_phase" in names else ""
        if said:
            judged += 1
            agree += said == phase
    return judged, agree


def join_accuracy(args: argparse.Namespace) -> None:
    """Per-sample agreement of the joined Python phase with the kernel's leaf (truth)."""
    print(
        "| py-spy mode | py-spy Hz | samples judged | accuracy | best time shift "
        "| accuracy at best shift | target CPU s | profiler CPU s (collector + py-spy) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    configs = [(False, args.hz), (False, 2 * args.hz), (True, args.hz)]
    for _ in range(args.repeat):
        for native, pyspy_hz in configs:
            c = CpuCollector(hz=args.hz, pyspy_hz=pyspy_hz, pyspy_native=native)
            before = self_and_children()
            fixture = ROOT / "tests/fixtures/cpu/phases.py"
            proc = subprocess.Popen([sys.executable, str(fixture), str(args.seconds)])
            c.add_target(proc.pid)
            samples = []
            while True:
                pid, _status, ru = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                time.sleep(0.5)
                samples += c.poll().samples
            samples += c.stop().samples
            profiler = self_and_children() - before - cpu_s(ru)
            label = "--native (pauses target)" if native else "--nonblocking"
            if native:  # merged stacks hold py-spy's native frames, not the kernel's leaf
                print(
                    f"| {label} | {pyspy_hz} | – | – | – | – | {cpu_s(ru):.2f} | {profiler:.2f} |"
                )
                continue
            unwinder = c._unwinders[proc.pid]
            truth = _phase_truth(samples)
            judged, agree = _agreement(unwinder, truth, 0)
            best = max(range(-20, 21, 2), key=lambda ms: _agreement(unwinder, truth, ms * 10**6)[1])
            bj, ba = _agreement(unwinder, truth, best * 10**6)
            print(
                f"| {label} | {pyspy_hz} | {judged} | {agree / max(judged, 1) * 100:.1f} % "
                f"| {best:+d} ms | {ba / max(bj, 1) * 100:.1f} % | {cpu_s(ru):.2f} "
                f"| {profiler:.2f} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--hz", type=int, default=99)
    ap.add_argument("--py-iters", type=int, default=20_000_000)
    ap.add_argument("--c-iters", type=int, default=2_000_000_000)
    ap.add_argument("--join-accuracy", action="store_true")
    ap.add_argument("--seconds", type=float, default=12)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    (join_accuracy if args.join_accuracy else overhead)(args)


if __name__ == "__main__":
    main()
