"""A long-running GPU pod workload that times its own GPU busy and idle, step by step.

What the H200 agent proof runs in its pods (tests/gpu/agent_proof.py): the node agent
switches the pod's injected tracer on and off while this loop runs, so kubeprof's figure
covers only part of the loop. Each step is timed with CUDA events (one at the step's start,
one after its GPU burst) and its host start (CLOCK_MONOTONIC, the clock of kubeprof's
records) is kept, so the workload's own idle can be computed over any window afterwards
(``truth_over``). At exit it prints ONE line::

    KUBEPROF_TRUTH {"mode": ..., "steps": [[host_start_ns, gpu_start_ms, busy_ms], ...], ...}

``gpu_start_ms`` is the step's start event, in ms after the loop's first event; ``busy_ms``
the time between the step's start event and the event after its burst. Each step synchronizes
after its burst, then runs a pure-Python host step, so the GPU idles while the host works.

Modes (``--mode``):

- ``half``: 2 bf16 8192^3 matmuls, then a host step as long as the burst: ~50 % idle.
- ``light``: 1 such matmul, then a host step 4x as long: ~80 % idle.
- ``graph``: a 4-layer MLP forward captured once as a CUDA graph (torch.cuda.graph), replayed
  each step by ``replay_step`` (its line is ``replay_line`` in the truth line), then a host
  step as long as the replay: ~50 % idle. ``--recapture-after S`` captures it again S seconds
  into the loop (a graph made while a tracer was already on, beside one made before).
- ``trickle``: one tiny kernel, then 20 ms of host work: ~100 % idle (a pod that barely
  touches the GPU).

    python examples/gpu_pod_truth.py --mode half --seconds 20
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import torch

N = 8192
MLP_WIDTH, MLP_LAYERS, MLP_BATCH = 8192, 4, 8192


def host_step(ms: float) -> int:
    """Pure-Python host work for ``ms`` milliseconds (the GPU idles meanwhile)."""
    deadline = time.perf_counter() + ms / 1000.0
    x = 0
    while time.perf_counter() < deadline:
        for i in range(200):
            x = (x * 31 + i) % 1_000_003
    return x


def replay_step(graph: torch.cuda.CUDAGraph) -> None:
    """One replay of the captured forward: every kernel in it is this line's."""
    graph.replay()  # KUBEPROF_TRUTH_REPLAY_LINE


def _line_of(marker: str) -> int:
    with open(__file__) as f:
        for n, line in enumerate(f, 1):
            if marker in line and "_line_of" not in line:
                return n
    return 0


def setup(mode: str) -> tuple[Any, float, dict[str, Any]]:
    """(burst callable, host step per burst ms, facts) of one mode."""
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    if mode in ("half", "light"):
        a = torch.randn(N, N, device=dev, dtype=torch.bfloat16, generator=g)
        b = torch.randn(N, N, device=dev, dtype=torch.bfloat16, generator=g)
        c = torch.empty_like(a)
        per = 2 if mode == "half" else 1

        def burst() -> None:
            for _ in range(per):
                torch.matmul(a, b, out=c)

        return burst, 1.0 if mode == "half" else 4.0, {"matmuls_per_step": per, "n": N}
    if mode == "trickle":
        x = torch.ones(256, device=dev)
        return (lambda: x.add_(1.0)), 0.0, {"host_ms_fixed": 20.0}
    if mode == "graph":
        layers = [
            torch.nn.Linear(MLP_WIDTH, MLP_WIDTH, device=dev, dtype=torch.bfloat16)
            for _ in range(MLP_LAYERS)
        ]
        x = torch.randn(MLP_BATCH, MLP_WIDTH, device=dev, dtype=torch.bfloat16, generator=g)

        def forward() -> torch.Tensor:
            h = x
            for lin in layers:
                h = torch.relu(lin(h))
            return h

        def capture() -> torch.cuda.CUDAGraph:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.no_grad(), torch.cuda.stream(side):
                for _ in range(3):  # warm-up on a side stream, as torch.cuda.graph asks
                    forward()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.no_grad(), torch.cuda.graph(graph):
                forward()
            torch.cuda.synchronize()
            return graph

        graphs = [capture()]
        facts = {
            "replay_line": _line_of("KUBEPROF_TRUTH_REPLAY_LINE"),
            "replay_function": "replay_step",
            "layers": MLP_LAYERS,
            "width": MLP_WIDTH,
            "batch": MLP_BATCH,
            "recapture": capture,
            "graphs": graphs,
        }
        return (lambda: replay_step(graphs[-1])), 1.0, facts
    raise SystemExit(f"unknown mode {mode!r}: half, light, graph or trickle")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", required=True, choices=("half", "light", "graph", "trickle"))
    p.add_argument("--seconds", type=float, default=20.0, help="length of the main loop")
    p.add_argument(
        "--recapture-after",
        type=float,
        default=0.0,
        help="graph mode: capture the graph again this many seconds into the loop "
        "(replays then use the new one)",
    )
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("gpu_pod_truth: no CUDA device", file=sys.stderr)
        return 2
    burst, host_per_burst, facts = setup(args.mode)
    for _ in range(5):  # warm-up, and the burst's length for the host step
        burst()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(5):
        burst()
    e1.record()
    torch.cuda.synchronize()
    burst_ms = e0.elapsed_time(e1) / 5
    host_ms = facts.get("host_ms_fixed", burst_ms * host_per_burst)

    recapture = facts.pop("recapture", None)
    graphs = facts.pop("graphs", [])
    recapture_at = time.monotonic() + args.recapture_after if recapture else None
    marks: list[tuple[int, torch.cuda.Event, torch.cuda.Event]] = []
    print(f"KUBEPROF_LOOP_START {time.monotonic_ns()}", flush=True)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        if (
            recapture_at is not None
            and args.recapture_after > 0
            and time.monotonic() >= recapture_at
        ):
            facts["recapture_start_ns"] = time.monotonic_ns()
            graphs.append(recapture())
            facts["recapture_end_ns"] = time.monotonic_ns()
            recapture_at = None
        t = time.monotonic_ns()
        s = torch.cuda.Event(enable_timing=True)
        s.record()
        burst()
        d = torch.cuda.Event(enable_timing=True)
        d.record()
        torch.cuda.synchronize()
        marks.append((t, s, d))
        host_step(host_ms)
    last = torch.cuda.Event(enable_timing=True)  # closes the last step's span
    last.record()
    torch.cuda.synchronize()
    first = marks[0][1]
    steps = [[t, round(first.elapsed_time(s), 4), round(s.elapsed_time(d), 4)] for t, s, d in marks]
    steps.append([time.monotonic_ns(), round(first.elapsed_time(last), 4), 0.0])
    busy = sum(st[2] for st in steps[:-1])
    whole = 1.0 - busy / steps[-1][1] if steps[-1][1] > 0 else None
    truth = {
        "mode": args.mode,
        "pid": os.getpid(),
        "burst_ms": round(burst_ms, 4),
        "host_step_ms": round(host_ms, 4),
        "idle_ratio": whole,
        "steps": steps,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        **facts,
    }
    print("KUBEPROF_TRUTH " + json.dumps(truth, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
