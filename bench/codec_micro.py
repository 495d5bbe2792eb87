"""Encode/decode time of the agent<->ingest codec, per row, against another codec module.

Usage:
  git show 13e38fb:agent/kubeprof/agent/cluster/codec.py > /tmp/codec_json.py
  .venv/bin/python bench/codec_micro.py --baseline /tmp/codec_json.py [--rows 5000] [--reps 30]

Two batch shapes: CPU samples with 24-frame stacks (500 distinct), and GPU activities plus
NVML readings. Each cell is the best of --reps runs (the machine is shared), in us per row,
both codecs measured alternately in the same process. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from kubeprof.model import Batch, GpuActivity, GpuMetricSample  # noqa: E402
from kubeprof.protocol import codec  # noqa: E402
from operator_ingest import make_batch, make_stacks  # noqa: E402


def load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("baseline_codec", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def gpu_batch(n: int, stacks: list) -> Batch:
    acts = tuple(
        GpuActivity(
            "kernel",
            f"_Z{i % 50}kernel",
            i,
            i + 5,
            0,
            4000,
            i,
            7,
            f"kernel{i % 50}",
            (1, 2, 3),
            (32, 1, 1),
            40,
            128,
            0,
            stacks[i % len(stacks)],
        )
        for i in range(n // 2)
    )
    mets = tuple(GpuMetricSample(i, 0, "gpu_util_pct", 42.5) for i in range(n - n // 2))
    return Batch(gpu_activities=acts, gpu_metrics=mets)


def best_us_per_row(fn, rows: int, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e6 / rows


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--baseline", required=True, help="path of a codec module to compare")
    p.add_argument("--rows", type=int, default=5000)
    p.add_argument("--reps", type=int, default=30)
    args = p.parse_args()
    base = load(args.baseline)
    rng = random.Random(1)
    stacks = make_stacks(500, 24, rng)
    shapes = {
        "cpu samples": make_batch(args.rows, stacks, rng, 0),
        "gpu activities + metrics": gpu_batch(args.rows, stacks),
    }
    print("| batch | op | baseline us/row | kubeprof.protocol.codec us/row | speed-up |")
    print("|---|---|---:|---:|---:|")
    for label, batch in shapes.items():
        n = codec.rows(batch)
        for op in ("encode", "decode"):
            times = {}
            for name, mod in (("base", base), ("new", codec)):
                body = mod.encode(batch, batch_id="b", node="n")
                assert codec.decode(body)[2] == batch and base.decode(body)[2] == batch
                fn = (
                    (lambda m=mod, x=batch: m.encode(x, batch_id="b", node="n"))
                    if op == "encode"
                    else (lambda m=mod, b=body: m.decode(b))
                )
                times[name] = fn
            res = {k: float("inf") for k in times}
            for _ in range(3):  # alternate, so load changes hit both
                for k, fn in times.items():
                    res[k] = min(res[k], best_us_per_row(fn, n, args.reps // 3 or 1))
            print(
                f"| {label} | {op} | {res['base']:.2f} | {res['new']:.2f} | "
                f"{res['base'] / res['new']:.2f}x |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
