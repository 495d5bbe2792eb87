"""What the injected tracer costs a pod while dormant, and once the node agent switches it on.

    python bench/gpu_dormant.py --rounds 5 --out results.json       # needs a CUDA GPU + torch

Each round starts three fresh processes, in turn: ``plain`` (no tracer), ``dormant`` (the
environment the injection webhook gives a pod: the tracer's sitecustomize on PYTHONPATH,
KUBEPROF_GPU_DORMANT=1, a pod UID; nothing switched on) and ``on`` (the same, switched on over
its control socket as the node agent does, records streamed to a receiver). Each process times
the launch-bound loop (20,000 tiny kernels) and the compute-bound loop (50 bf16 GEMMs) after a
warm-up. Ratios are of medians over rounds, against ``plain`` of the same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OPS = 20_000
MATMULS = 50


def child(go_file: str, reps: int) -> None:
    import torch

    x = torch.ones(256, device="cuda")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)

    def launch_bound() -> float:
        t0 = time.perf_counter()
        for _ in range(OPS // 2):
            x.add_(1.0)
            x.mul_(0.5)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def compute_bound() -> float:
        t0 = time.perf_counter()
        for _ in range(MATMULS):
            torch.matmul(a, a, out=c)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    launch_bound()
    compute_bound()
    print("ready", flush=True)
    while go_file and not os.path.exists(go_file):
        time.sleep(0.05)
    launch = [launch_bound() for _ in range(reps)]
    compute = [compute_bound() for _ in range(reps)]
    print(
        json.dumps(
            {"launch_s": statistics.median(launch), "compute_s": statistics.median(compute)}
        ),
        flush=True,
    )


def run(mode: str, reps: int) -> dict:
    sys.path[:0] = [str(REPO / "src"), str(REPO / "agent")]
    from kubeprof.agent.gpu.control import pod_sockets, switch
    from kubeprof.agent.gpu.inject import tracer_env
    from kubeprof.agent.gpu.receiver import GpuReceiver

    work = tempfile.mkdtemp(prefix="kpdormant-")
    sock = os.path.join(work, "gpu.sock")
    go = os.path.join(work, "go")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(REPO / "src"), str(REPO / "agent"), os.environ.get("PYTHONPATH", "")]
        ),
    }
    rx = None
    if mode != "plain":
        rx = GpuReceiver(sock)
        rx.start()
        env.update(tracer_env(sock, base=env))
        env.update(KUBEPROF_GPU_DORMANT="1", KUBEPROF_POD_UID="bench-pod")
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", go, "--reps", str(reps)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    answer = ""
    if line.strip() == "ready" and mode == "on":
        socks = pod_sockets(sock, "bench-pod")
        answer = switch(socks[0], "on") if socks else "no control socket"
    Path(go).touch()
    out, err = proc.communicate()
    kernels = 0
    if rx is not None:
        kernels = sum(a.kind == "kernel" for a in rx.stop().gpu_activities)
    if proc.returncode != 0:
        return {"mode": mode, "error": err[-1500:]}
    res = json.loads(out.strip().splitlines()[-1])
    return {"mode": mode, **res, "switch": answer, "kernels_received": kernels}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", default=None)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default="")
    args = p.parse_args()
    if args.child is not None:
        child(args.child, args.reps)
        return
    runs: list[dict] = []
    for _ in range(args.rounds):
        for mode in ("plain", "dormant", "on"):
            r = run(mode, args.reps)
            print(json.dumps(r), flush=True)
            runs.append(r)
    table = {}
    for mode in ("plain", "dormant", "on"):
        ok = [r for r in runs if r["mode"] == mode and "error" not in r]
        if ok:
            table[mode] = {
                k: statistics.median([r[k] for r in ok]) for k in ("launch_s", "compute_s")
            }
    base = table.get("plain")
    summary = {
        m: {
            **v,
            **(
                {
                    "launch_x": v["launch_s"] / base["launch_s"],
                    "compute_x": v["compute_s"] / base["compute_s"],
                }
                if base
                else {}
            ),
        }
        for m, v in table.items()
    }
    print(json.dumps({"summary": summary}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"runs": runs, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
