"""A GPU workload that stamps its own launches: one matmul per step on an idle GPU.

Before each step's ``x @ x`` it reads CLOCK_MONOTONIC (``time.monotonic_ns``, the clock
kubeprof's launch times are in), after ``synchronize`` it reads it again, and prints both
with its thread id as ``KUBEPROF_TRUTH {...}``: the launch kubeprof records for the step's
kernel must fall between the two, on that thread. Used to record
tests/fixtures/gpu/truth/launch_time (see its README).
"""

from __future__ import annotations

import argparse
import json
import threading
import time


def main() -> None:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--size", type=int, default=2048)
    args = p.parse_args()
    x = torch.randn(args.size, args.size, device="cuda")
    y = x @ x  # cuBLAS set-up outside the stamped steps
    torch.cuda.synchronize()
    steps = []
    for _ in range(args.steps):
        before = time.monotonic_ns()
        y = x @ x
        torch.cuda.synchronize()
        steps.append((before, time.monotonic_ns()))
        time.sleep(0.002)
    del y
    truth = {"tid": threading.get_native_id(), "steps": steps}
    print("KUBEPROF_TRUTH " + json.dumps(truth), flush=True)


if __name__ == "__main__":
    main()
