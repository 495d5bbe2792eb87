"""Cost of the off-CPU probe per knob setting, beside the on-CPU sampler alone.

    sudo .venv/bin/python bench/offcpu_overhead.py [--seconds 4] [--rounds 2]

Two workloads run under one `CpuCollector` per knob setting (99 Hz on-CPU sampling in all):
a queue ping-pong between two Python threads (every hand-over is a futex wait and a
switch), and a CPU-bound Python loop (switches only when preempted). Settings: the probe
off (`--offcpu-every 0`, the on-CPU sampler alone), and on with several minimum blocked
times and switch sampling. Per run: the workload's rate (round trips per second, or loop
iterations) and its voluntary+involuntary switches per second from /proc; the BPF run
time of each of the collector's programs (`kernel.bpf_stats_enabled`, read from the
programs' fdinfo), split into the on-CPU sampler and the off-CPU probe's two tracepoints;
the collector's own user-space CPU (this process's rusage over the run); the waits kept
and the counters. Note: the probe's `raw_syscalls:sys_exit` program runs for every
syscall on the machine (other processes included) and returns at the first lookup
unless the thread is followed; its run count below is machine-wide.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time

from kubeprof.agent.cpu.collector import CpuCollector
from kubeprof.agent.cpu.offcpu_probe import OffCpuKnobs

PINGPONG = r"""
import queue, sys, threading, time
a, b = queue.Queue(), queue.Queue()
def echo():
    while (x := a.get()) is not None:
        b.put(x)
t = threading.Thread(target=echo); t.start()
end, n = time.perf_counter() + float(sys.argv[1]), 0
while time.perf_counter() < end:
    a.put(n); b.get(); n += 1
a.put(None); t.join()
print(n / float(sys.argv[1]))
"""
SPIN = r"""
import sys, time
end, n = time.perf_counter() + float(sys.argv[1]), 0
while time.perf_counter() < end:
    n += 1
print(n / float(sys.argv[1]))
"""
SETTINGS = [  # (label, knobs)
    ("probe off (on-CPU sampler only)", OffCpuKnobs(every=0)),
    ("min 1000 us, every switch (default)", OffCpuKnobs(min_us=1000, every=1)),
    ("min 0 us, every switch", OffCpuKnobs(min_us=0, every=1)),
    ("min 1000 us, 1 in 10 switches", OffCpuKnobs(min_us=1000, every=10)),
]


def prog_stats(collector: CpuCollector) -> dict[str, tuple[int, int]]:
    """program name -> (run_time_ns, run_cnt) of the collector's BPF programs."""
    out: dict[str, tuple[int, int]] = {}
    for name, fn in collector._sampler._bpf.funcs.items():  # type: ignore[union-attr]
        with open(f"/proc/self/fdinfo/{fn.fd}") as f:
            info = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        short = name.decode().removeprefix("tracepoint__")
        out[short] = (int(info.get("run_time_ns", "0")), int(info.get("run_cnt", "0")))
    return out


def switches(pid: int) -> int:
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                text = f.read()
            total += sum(int(v) for v in re.findall(r"ctxt_switches:\s+(\d+)", text))
    except OSError:
        pass
    return total


def run(collector: CpuCollector, code: str, seconds: float) -> dict[str, float]:
    before = prog_stats(collector)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(seconds)], stdout=subprocess.PIPE, text=True
    )
    collector.add_target(proc.pid)
    waits, sw = 0, 0
    counters: dict[str, int] = {}
    while proc.poll() is None:
        time.sleep(0.25)
        sw = max(sw, switches(proc.pid))
        b = collector.poll()
        waits += len(b.offcpu_samples)
        for k, v in b.counters.items():
            counters[k] = counters.get(k, 0) + v
    rate = float(proc.stdout.read().strip() or 0) if proc.stdout else 0.0
    time.sleep(2.1)  # the collector reads the kernel's counters every 2 s
    b = collector.poll()
    waits += len(b.offcpu_samples)
    for k, v in b.counters.items():
        counters[k] = counters.get(k, 0) + v
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    after = prog_stats(collector)
    delta = {
        k: (after[k][0] - before.get(k, (0, 0))[0], after[k][1] - before.get(k, (0, 0))[1])
        for k in after
    }
    return {
        "rate": rate,
        "switches_s": sw / seconds,
        "waits": waits,
        "agent_cpu_s": (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime),
        "wall_s": wall,
        "progs": delta,
        "counters": counters,
    }  # type: ignore[dict-item]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    subprocess.run(["sysctl", "-q", "-w", "kernel.bpf_stats_enabled=1"], check=False)
    rows = []
    try:
        for label, knobs in SETTINGS:
            t0 = time.monotonic()
            c = CpuCollector(99, offcpu=knobs)
            start_s = time.monotonic() - t0
            names = {}
            for work, code in (("ping-pong", PINGPONG), ("cpu loop", SPIN)):
                for r in range(args.rounds):
                    res = run(c, code, args.seconds)
                    rows.append((label, work, r, res))
                    names = res["progs"]
            c.stop()
            print(
                f"# {label}: collector start {start_s:.1f} s, programs {list(names)}",
                file=sys.stderr,
            )
    finally:
        subprocess.run(["sysctl", "-q", "-w", "kernel.bpf_stats_enabled=0"], check=False)
    print(
        "| setting | workload | rate /s | switches /s | on-CPU BPF ms | sched_switch runs "
        "/ ms / ns per run | sys_exit runs / ms / ns per run | agent CPU ms | waits kept "
        "| short | skipped | unattributed |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, work, _, res in rows:
        progs = res["progs"]
        c = res["counters"]

        def cell(name: str, progs: dict = progs) -> str:
            ns, cnt = progs.get(name, (0, 0))  # type: ignore[union-attr]
            return f"{cnt:,} / {ns / 1e6:.1f} / {ns / max(cnt, 1):.0f}" if cnt else "-"

        on_ms = progs.get("on_cpu_clock", (0, 0))[0] / 1e6  # type: ignore[union-attr]
        print(
            f"| {label} | {work} | {res['rate']:,.0f} | {res['switches_s']:,.0f} "
            f"| {on_ms:.1f} | {cell('sched__sched_switch')} | {cell('raw_syscalls__sys_exit')} "
            f"| {res['agent_cpu_s'] * 1e3:.0f} | {res['waits']} | {c.get('offcpu_short', 0):,} "
            f"| {c.get('offcpu_skipped', 0):,} | {c.get('offcpu_unattributed', 0):,} |"
        )


if __name__ == "__main__":
    main()
