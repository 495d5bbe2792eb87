"""Size and time of `kubeprof report -f perfetto` for a session of 1 M kernels.

Usage: .venv/bin/python bench/perfetto_scale.py [--kernels 1000000] [--repeat 2]

The session is the H200 torch recording (tests/fixtures/gpu/torch_fast: 12,000 kernels with
their memsets, copies, syncs and NVTX ranges, real kernel names and launching stacks)
repeated back to back until it holds ``kernels`` kernels, plus the CPU samples of the
truth/train_torch recording repeated over the same span. The measured part is what the
export adds to a report: building the trace events and writing them, one by one, as JSON
(`report.perfetto.write_perfetto`) to a .json file, then once to a .json.gz; loading the
records from the store is the same query every format runs and is not part of it.
"""

from __future__ import annotations

import argparse
import gzip
import platform
import resource
import sys
import tempfile
import time
from array import array
from dataclasses import replace
from pathlib import Path

from kubeprof.analysis import gpu_trace, phases
from kubeprof.analysis.cpu_samples import SampleColumns, ThreadSamples, from_samples
from kubeprof.model import GpuActivity
from kubeprof.report.perfetto import write_perfetto

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "gpu"
sys.path.insert(0, str(FIXTURES))

import trace_io  # noqa: E402 - the fixture reader lives next to the fixtures

# On a shared machine wall time includes waiting for a core: the CPU time (process_time)
# of each run is printed beside it.


def build(kernels: int) -> tuple[list[GpuActivity], SampleColumns, int, int]:
    base = trace_io.load_trace(FIXTURES / "torch_fast.jsonl.gz")
    start = base.meta["session_start_ns"]
    span = base.meta["session_end_ns"] - start
    per = sum(a.kind == "kernel" for a in base.activities)
    acts: list[GpuActivity] = []
    rep = 0
    while rep * per < kernels:
        shift = rep * span
        acts += [
            replace(
                a,
                start_ns=a.start_ns + shift,
                end_ns=a.end_ns + shift,
                correlation_id=a.correlation_id + rep * 1_000_000,
            )
            for a in base.activities
        ]
        rep += 1
    truth = trace_io.load_trace(FIXTURES / "truth" / "train_torch.jsonl.gz")
    cols = from_samples(truth.samples, 99.0, "py-spy")
    t_span = truth.meta["session_end_ns"] - truth.meta["session_start_ns"]
    copies = (rep * span) // t_span + 1
    threads = []
    for t in cols.threads:
        ts = array("q")
        ids = array("q")
        for c in range(copies):
            off = start - truth.meta["session_start_ns"] + c * t_span
            ts.extend(x + off for x in t.ts_ns)
            ids.extend(t.stack_ids)
        threads.append(ThreadSamples(t.pid, t.tid, t.thread, ts, ids))
    return (
        acts,
        SampleColumns(tuple(threads), cols.stacks, cols.hz, cols.source),
        start,
        start + rep * span,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    t = time.perf_counter()
    acts, cpu, start, end = build(args.kernels)
    built = time.perf_counter() - t
    n_kernels = sum(a.kind == "kernel" for a in acts)
    n_samples = sum(len(th.ts_ns) for th in cpu.threads)
    t = time.perf_counter()
    ph = phases.detect(gpu_trace.build(acts), phases.Window(start, end))
    phase_s = time.perf_counter() - t
    args_ = {"session": "bench", "start_ns": start, "activities": acts, "cpu": cpu, "phases": ph}
    runs, cpu_runs, gz_runs = [], [], []
    events = 0
    with tempfile.TemporaryDirectory() as d:
        plain, packed = Path(d) / "t.trace.json", Path(d) / "t.trace.json.gz"
        for _ in range(args.repeat):
            t, c = time.perf_counter(), time.process_time()
            with plain.open("w", encoding="utf-8") as f:
                events = write_perfetto(f, **args_)
            runs.append(time.perf_counter() - t)
            cpu_runs.append(time.process_time() - c)
        t = time.perf_counter()
        with gzip.open(packed, "wt", encoding="utf-8", compresslevel=6) as f:
            write_perfetto(f, **args_)
        gz_runs.append(time.perf_counter() - t)
        size, gz_size = plain.stat().st_size, packed.stat().st_size
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"python {platform.python_version()}; {len(acts):,} records ({n_kernels:,} kernels), "
        f"{n_samples:,} CPU samples; inputs built in {built:.1f} s (peak RSS includes "
        f"them), phases {phase_s:.1f} s"
    )
    print(
        "| kernels | all records | CPU samples | events | .json | .json.gz | write .json "
        "(best, wall) | runs (wall) | their CPU time | write .json.gz | peak RSS |"
    )
    print(
        f"| {n_kernels:,} | {len(acts):,} | {n_samples:,} | {events:,} | "
        f"{size / 2**20:,.0f} MiB | {gz_size / 2**20:,.0f} MiB | **{min(runs):.1f} s** | "
        f"{', '.join(f'{r:.1f}' for r in runs)} | {', '.join(f'{r:.1f}' for r in cpu_runs)} | "
        f"{gz_runs[0]:.1f} s | {rss:,.0f} MiB |"
    )


if __name__ == "__main__":
    main()
