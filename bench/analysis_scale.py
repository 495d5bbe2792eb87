"""How long the findings analysis takes on a large session: 1 M kernels, 10 M CPU samples.

Usage: .venv/bin/python bench/analysis_scale.py [--kernels 1000000] [--samples 10000000]
       [--threads 100] [--repeat 3]

The session is a training loop of 50 kernels per step (10 kernel names, 20 µs each, 5 µs
launch gaps) and a 50 ms host step (the GPU starved), long enough for the samples:
``threads`` threads of the launching process sampled at 99 Hz, 1,000 distinct stacks.
Building the inputs is timed apart; ``analyse`` (phases, figures, timeline, breakdown,
CPU stacks during idle, every finding) is the measured part, best of ``repeat`` runs.
"""

from __future__ import annotations

import argparse
import platform
import resource
import time
from array import array

from kubeprof.analysis.cpu_samples import SampleColumns, ThreadSamples
from kubeprof.analysis.findings import Window, analyse
from kubeprof.model import Frame, FrameKind, GpuActivity

PER_STEP = 50
KERNEL_NS, GAP_NS, HOST_NS = 20_000, 5_000, 50_000_000


def build_kernels(n: int) -> tuple[list[GpuActivity], int, int]:
    script = "/app/train.py"
    stack = (
        Frame("<module>", FrameKind.PYTHON, script, 90),
        Frame("train_step", FrameKind.PYTHON, script, 42),
        Frame("cudaLaunchKernel", FrameKind.CUDA_API),
    )
    names = [f"kernel_{i}" for i in range(10)]
    t0 = t = 1_000_000_000
    acts = []
    for i in range(n):
        if i and i % PER_STEP == 0:
            t += HOST_NS
        acts.append(
            GpuActivity("kernel", names[i % 10], t, t + KERNEL_NS, 0, 100, i, 7, stack=stack)
        )
        t += KERNEL_NS + GAP_NS
    return acts, t0, t


def build_samples(n: int, threads: int, t0: int, t1: int) -> SampleColumns:
    script = "/app/train.py"
    root = Frame("<module>", FrameKind.PYTHON, script, 90)
    stacks = [
        (root, Frame(f"fn_{i}", FrameKind.PYTHON, f"/app/mod_{i % 37}.py", i)) for i in range(1000)
    ]
    per = n // threads
    step = (t1 - t0) // per
    out = []
    for k in range(threads):
        ts = array("q", range(t0 + k, t0 + k + per * step, step))
        ids = array("q", ((j * 7 + k) % 1000 for j in range(per)))
        out.append(ThreadSamples(100, 100 + k, f"t{k}", ts, ids))
    return SampleColumns(tuple(out), tuple(stacks), hz=1e9 / step, source="bpf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--threads", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    t = time.perf_counter()
    acts, t0, t1 = build_kernels(args.kernels)
    cols = build_samples(args.samples, args.threads, t0, t1)
    built = time.perf_counter() - t
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        result = analyse(acts, [], cols, Window(t0 - 1_000_000_000, t1))
        times.append(time.perf_counter() - t)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"python {platform.python_version()}, {args.kernels:,} kernels, "
        f"{sum(len(th.ts_ns) for th in cols.threads):,} CPU samples in {args.threads} threads"
    )
    print(f"inputs built in {built:.1f} s; peak RSS {rss:.0f} MiB")
    print(f"analyse: best {min(times):.2f} s, runs " + ", ".join(f"{x:.2f}" for x in times))
    print(
        f"headline idle {result.headline.ratio:.3f}, {result.phases.steps} steps, "
        f"findings: {', '.join(f.kind for f in result.findings)}"
    )


if __name__ == "__main__":
    main()
