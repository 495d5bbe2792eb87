"""`kubeprof agent --light`: always-on GPU idle per pod from NVML, served on /metrics."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger("kubeprof.agent.light")

DESCRIPTION = """\
Poll NVML (per-process SM utilization and memory) on this node, attribute each GPU
process to its pod through /proc/<pid>/cgroup, and serve kubeprof_gpu_idle_ratio,
kubeprof_gpu_busy_ratio and kubeprof_gpu_memory_used_bytes per
{namespace,pod,container,node,gpu} over a rolling window, plus per-GPU figures, for
Prometheus. No eBPF, no tracer. GPUs NVML cannot attribute (MIG, MPS) are reported in
kubeprof_gpu_unattributable_info instead of a guessed per-pod figure.
"""


def build_parser() -> argparse.ArgumentParser:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="kubeprof agent --light", description=DESCRIPTION)
    p.add_argument(
        "--node-name",
        default=env("NODE_NAME", ""),
        help="this node's name (env NODE_NAME, from spec.nodeName)",
    )
    p.add_argument(
        "--listen",
        default=env("KUBEPROF_LIGHT_LISTEN", "0.0.0.0:9400"),
        help="HOST:PORT of /metrics (env KUBEPROF_LIGHT_LISTEN, default %(default)s)",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=float(env("KUBEPROF_LIGHT_INTERVAL_S", "1")),
        help="seconds between NVML polls (env KUBEPROF_LIGHT_INTERVAL_S, default %(default)s)",
    )
    p.add_argument(
        "--window",
        type=float,
        default=float(env("KUBEPROF_LIGHT_WINDOW_S", "60")),
        help="rolling window of the figures, seconds (env KUBEPROF_LIGHT_WINDOW_S, "
        "default %(default)s)",
    )
    p.add_argument(
        "--pods-interval",
        type=float,
        default=15.0,
        help="seconds between refreshes of this node's pod list (default %(default)s)",
    )
    p.add_argument(
        "--proc-root",
        type=Path,
        default=Path(env("KUBEPROF_PROC_ROOT", "/proc")),
        help="the host's /proc (the pod runs with hostPID) (default %(default)s)",
    )
    p.add_argument(
        "--replay",
        type=Path,
        default=None,
        help="read NVML readings from this recording (JSON lines) instead of the "
        "GPU, cycling; for nodes without a GPU (kwok) and tests",
    )
    p.add_argument("--kubeconfig", default=None, help="outside a cluster: kubeconfig to use")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from prometheus_client import start_http_server
    from prometheus_client.registry import CollectorRegistry

    from kubeprof.agent.light.exporter import WindowCollector
    from kubeprof.agent.light.pods import Resolver, list_node_pods, pod_names
    from kubeprof.agent.light.readings import ReadingError, RecordedSource, Source
    from kubeprof.agent.light.window import Window, attribute

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if not args.node_name:
        print("kubeprof agent --light: error: --node-name (env NODE_NAME) is required", flush=True)
        return 2
    host, _, port = args.listen.rpartition(":")
    if not port.isdigit():
        print(f"kubeprof agent --light: error: --listen {args.listen!r}: expected HOST:PORT")
        return 2
    try:
        window = Window(args.window)
        source: Source
        if args.replay is not None:
            source = RecordedSource(args.replay)
        else:
            from kubeprof.agent.light.nvml_source import NvmlSource

            source = NvmlSource()
    except (ReadingError, ValueError, RuntimeError) as exc:
        print(f"kubeprof agent --light: error: {exc}", flush=True)
        return 2
    registry = CollectorRegistry()
    registry.register(WindowCollector(window, args.node_name))
    start_http_server(int(port), addr=host or "0.0.0.0", registry=registry)
    resolver = Resolver(args.proc_root)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    next_pods = 0.0
    log.info("light agent on %s serving %s", args.node_name, args.listen)
    while not stop.is_set():
        now = time.monotonic()
        if now >= next_pods:
            try:
                resolver.pods = pod_names(list_node_pods(args.node_name, args.kubeconfig))
            except Exception as exc:  # noqa: BLE001 - API down: keep the last pod list
                log.warning("pod list failed, keeping the last one: %s", exc)
            next_pods = now + args.pods_interval
        window.add(now, [attribute(r, resolver) for r in source.read()])
        stop.wait(args.interval)
    source.close()
    return 0
