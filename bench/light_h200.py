"""H200: the landed light agent's NvmlSource + Window beside each examples/gpu_truth.py mode.

For each mode: start the workload, then run the agent's own poll loop (``NvmlSource.read()``,
``attribute`` by PID, ``Window.add``) every --interval s until the workload exits; compare
the agent's per-process idle (every poll in which the process held the GPU, as the running
agent reports it, and only the polls inside the workload's timed loop) with the workload's
own CUDA-event idle. Each poll's readings are written as ``RecordedSource`` lines (the
``--replay`` format) so CI replays them through the same reader shape. Also times every
``read()`` (wall and this thread's CPU) and the attribute+window step, during the modes and
over back-to-back polls with the GPU idle.

Usage (GPU machine, repo root, PYTHONPATH=src:agent:operator):
  python3 bench/light_h200.py --out DIR [--interval 0.5] [--steps-x 3] [MODE ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from kubeprof.agent.light.exporter import WindowCollector
from kubeprof.agent.light.nvml_source import NvmlSource
from kubeprof.agent.light.readings import DeviceReading
from kubeprof.agent.light.window import Owner, Window, attribute

OWNER = Owner("bench", "truth", "main")
DEFAULT_STEPS = {"compute": 500, "half": 250, "starved": 200, "tiny": 400}


def _poll(
    src: NvmlSource, owner_of: object, window: Window, costs: dict[str, list[float]]
) -> tuple[float, list[DeviceReading]]:
    """One agent poll, timed: read (wall, CPU) then attribute + window step (CPU)."""
    t0, c0 = time.perf_counter(), time.thread_time()
    readings = src.read()
    t1, c1 = time.perf_counter(), time.thread_time()
    now = time.monotonic()
    window.add(now, [attribute(r, owner_of) for r in readings])  # type: ignore[arg-type]
    window.pods()
    c2 = time.thread_time()
    costs["read_wall_ms"].append(1000 * (t1 - t0))
    costs["read_cpu_ms"].append(1000 * (c1 - c0))
    costs["window_cpu_ms"].append(1000 * (c2 - c1))
    return now, readings


def _idle(
    polls: list[tuple[float, list[DeviceReading]]], pid: int, keep: object = None
) -> tuple[float | None, int]:
    w = Window(3600.0)
    owner_of = lambda p: OWNER if p == pid else None  # noqa: E731
    prev = None
    for ts, readings in polls:
        if keep is None or keep(prev, ts):  # type: ignore[operator]
            w.add(ts, [attribute(r, owner_of) for r in readings])
        prev = ts
    figs = w.pods()
    return (figs[0].idle_ratio, figs[0].polls) if figs else (None, 0)


def run_mode(
    src: NvmlSource,
    mode: str,
    steps_x: int,
    interval: float,
    out: Path,
    costs: dict[str, list[float]],
    script: str = "examples/gpu_truth.py",
    tag: str = "",
) -> dict:
    cmd = [sys.executable, script, "--mode", mode, "--steps", str(DEFAULT_STEPS[mode] * steps_x)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    owner_of = lambda p: OWNER if p == proc.pid else None  # noqa: E731
    window = Window(3600.0)
    polls: list[tuple[float, list[DeviceReading]]] = []
    pids: set[int] = set()
    while proc.poll() is None:
        ts, readings = _poll(src, owner_of, window, costs)
        polls.append((ts, readings))
        pids |= {p.pid for r in readings for p in r.processes}
        time.sleep(interval)
    text = proc.stdout.read() if proc.stdout else ""
    truth = next(
        json.loads(ln.split(" ", 1)[1])
        for ln in text.splitlines()
        if ln.startswith("KUBEPROF_TRUTH ")
    )
    with (out / f"nvml_{mode}{tag}.jsonl").open("w") as fh:
        for ts, readings in polls:
            fh.write(
                json.dumps(
                    {"t": round(ts, 6), "devices": [dataclasses.asdict(r) for r in readings]}
                )
                + "\n"
            )
    start, end = truth["main_start_ns"] / 1e9, truth["main_end_ns"] / 1e9
    figs = window.pods()
    registry = CollectorRegistry()
    registry.register(WindowCollector(window, "h200"))
    exported = [
        ln
        for ln in generate_latest(registry).decode().splitlines()
        if ln.startswith("kubeprof_gpu_idle_ratio{")
    ]
    loop_idle, loop_polls = _idle(
        polls,
        proc.pid,
        lambda prev, ts: prev is not None and prev >= start and ts <= end + interval / 2,
    )
    return {
        "mode": mode,
        "steps": DEFAULT_STEPS[mode] * steps_x,
        "pid": proc.pid,
        "pids_seen": sorted(pids),
        "truth_idle": truth["idle_ratio"],
        "main_start_s": start,
        "main_end_s": end,
        "agent_idle": figs[0].idle_ratio if figs else None,
        "agent_polls": figs[0].polls if figs else 0,
        "agent_idle_loop": loop_idle,
        "loop_polls": loop_polls,
        "polls": len(polls),
        "exported": exported,
    }


def _summary(vals: list[float]) -> dict[str, float]:
    s = sorted(vals)
    return {
        "n": len(s),
        "mean": statistics.fmean(s),
        "p50": s[len(s) // 2],
        "p95": s[int(0.95 * (len(s) - 1))],
        "max": s[-1],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--steps-x", type=int, default=3)
    ap.add_argument("--idle-polls", type=int, default=200)
    ap.add_argument("--truth-script", default="examples/gpu_truth.py")
    ap.add_argument("--tag", default="", help="suffix of the output files' names")
    ap.add_argument("modes", nargs="*", default=list(DEFAULT_STEPS), help="MODE or MODE:STEPS_X")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    src = NvmlSource()
    nv = src._nv
    env = {
        "driver": nv.nvmlSystemGetDriverVersion(),
        "gpu": nv.nvmlDeviceGetName(src._handles[0][1]),
        "interval_s": a.interval,
    }
    print(json.dumps(env), flush=True)
    rows, busy_costs = [], {"read_wall_ms": [], "read_cpu_ms": [], "window_cpu_ms": []}
    for spec in a.modes:
        m, _, x = spec.partition(":")
        try:
            rows.append(
                run_mode(
                    src,
                    m,
                    int(x or a.steps_x),
                    a.interval,
                    a.out,
                    busy_costs,
                    a.truth_script,
                    a.tag,
                )
            )
        except Exception as exc:  # noqa: BLE001 - one mode failing must not lose the others
            rows.append({"mode": m, "error": repr(exc)})
        print(json.dumps(rows[-1]), flush=True)
    idle_costs: dict[str, list[float]] = {
        "read_wall_ms": [],
        "read_cpu_ms": [],
        "window_cpu_ms": [],
    }
    w = Window(60.0)
    for _ in range(a.idle_polls):
        _poll(src, lambda _p: None, w, idle_costs)
    cost = {
        "during_modes": {k: _summary(v) for k, v in busy_costs.items()},
        "gpu_idle_back_to_back": {k: _summary(v) for k, v in idle_costs.items()},
        "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    print(json.dumps(cost), flush=True)
    src.close()
    (a.out / f"nvml_truth{a.tag}.json").write_text(
        json.dumps({"env": env, "modes": rows, "cost": cost}, indent=1)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
