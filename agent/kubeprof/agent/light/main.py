"""`kubeprof agent --light`: always-on GPU idle per pod from NVML, served on /metrics."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kubeprof.agent.setting_flags import add_env_flags, add_setting_flags
from kubeprof.protocol.settings import AgentSettings

if TYPE_CHECKING:
    from kubeprof.agent.light.deep import DeepSwitch

log = logging.getLogger("kubeprof.agent.light")

DESCRIPTION = """\
Poll NVML (per-process SM utilization and memory) on this node, attribute each GPU
process to its pod through /proc/<pid>/cgroup, and serve kubeprof_gpu_idle_ratio,
kubeprof_gpu_busy_ratio and kubeprof_gpu_memory_used_bytes per
{namespace,pod,container,node,gpu} over a rolling window, plus per-GPU figures, for
Prometheus. No eBPF, no tracer. GPUs NVML cannot attribute (MIG, MPS) are reported in
kubeprof_gpu_unattributable_info instead of a guessed per-pod figure.
"""


# (flag, type, variable, default, help): the light agent's own variables.
_OWN_FLAGS = (
    (
        "--listen",
        str,
        "KUBEPROF_LIGHT_LISTEN",
        "0.0.0.0:9400",
        "HOST:PORT of /metrics (env {env}, default %(default)s)",
    ),
    (
        "--interval",
        float,
        "KUBEPROF_LIGHT_INTERVAL_S",
        "1",
        "seconds between NVML polls (env {env}, default %(default)s)",
    ),
    (
        "--window",
        float,
        "KUBEPROF_LIGHT_WINDOW_S",
        "60",
        "rolling window of the figures, seconds (env {env}, default %(default)s)",
    ),
)
# (flag, AgentSettings field, help) for the deep-profiling group: the node agent's settings.
_DEEP_SETTING_FLAGS = (
    (
        "--operator-url",
        "ingest_url",
        "the operator's ingest API, e.g. http://kubeprof.kubeprof:8080 (env {env})",
    ),
    (
        "--spool-dir",
        "spool_dir",
        "host folder where sessions' batches wait until stored; the same folder as the "
        "per-session agents', so either ships what the other left (env {env}, "
        "default %(default)s)",
    ),
    (
        "--rescan-interval",
        "rescan_interval_s",
        "seconds between a session's target/process rescans (env {env}, default %(default)s)",
    ),
    (
        "--drain-timeout",
        "drain_timeout_s",
        "seconds to keep sending a session's spool when it ends (env {env}, default %(default)s)",
    ),
)
_DEEP_OWN_FLAGS = (
    (
        "--heartbeat-interval",
        float,
        "KUBEPROF_LIGHT_HEARTBEAT_S",
        "5",
        "seconds between heartbeats to the operator (env {env}, default %(default)s)",
    ),
)


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """Flags whose defaults come from `environ` (os.environ by default): the variables the
    node agent shares through `AgentSettings`, and the light agent's own."""
    environ = os.environ if environ is None else environ
    s, env = AgentSettings.from_env(environ), environ.get
    p = argparse.ArgumentParser(prog="kubeprof agent --light", description=DESCRIPTION)
    add_setting_flags(
        p, s, [("--node-name", "node_name", "this node's name (env {env}, from spec.nodeName)")]
    )
    add_env_flags(p, environ, _OWN_FLAGS)
    p.add_argument(
        "--pods-interval",
        type=float,
        default=15.0,
        help="seconds between refreshes of this node's pod list (default %(default)s)",
    )
    p.add_argument(
        "--proc-root",
        type=Path,
        default=s.proc_root,
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
    deep = p.add_argument_group(
        "deep profiling",
        "profile the pods of ProfilingSessions on this node when the "
        "operator hands them over, instead of a per-session DaemonSet pod here (needs the "
        "capabilities of `kubeprof agent`: BPF, PERFMON, SYS_PTRACE)",
    )
    deep.add_argument(
        "--deep",
        action="store_true",
        default=env("KUBEPROF_LIGHT_DEEP", "") not in ("", "0", "false"),
        help="report to the operator and take sessions over (env KUBEPROF_LIGHT_DEEP=1)",
    )
    deep.add_argument(
        "--token-file",
        dest="light_token_file",
        type=Path,
        default=Path(env("KUBEPROF_LIGHT_TOKEN_FILE", "/var/run/kubeprof-light/token")),
        help="the token sent to the operator, read at every request: the pod's projected "
        "ServiceAccount token (audience kubeprof.dev/ingest), or the light agents' shared "
        "token from its Secret (env "
        "KUBEPROF_LIGHT_TOKEN_FILE, default %(default)s)",
    )
    add_setting_flags(deep, s, _DEEP_SETTING_FLAGS)
    add_env_flags(deep, environ, _DEEP_OWN_FLAGS)
    return p


# Flags that are node-agent settings under another name (operator_url is the ingest's).
_RENAMED = {
    "operator_url": "ingest_url",
    "rescan_interval": "rescan_interval_s",
    "drain_timeout": "drain_timeout_s",
}


def _deep_switch(args: argparse.Namespace) -> tuple[DeepSwitch | None, str | None]:
    """The DeepSwitch for --deep (None without it), or a configuration error."""
    if not args.deep:
        return None, None
    if not args.operator_url:
        return None, f"--deep needs --operator-url (env {AgentSettings.env_name('ingest_url')})"
    from kubeprof.agent.cluster.client import TokenFile

    try:
        token = TokenFile(args.light_token_file)  # re-read per request: the kubelet rotates it
    except OSError as exc:
        return None, (
            f"--token-file: {exc} (mount the pod's projected ServiceAccount token, or the "
            "light agents' token Secret, there)"
        )
    if not token():
        return None, f"--token-file {args.light_token_file} is empty"
    from kubeprof.agent.cpu.preflight import check_environment
    from kubeprof.agent.light.deep import DeepConfig, DeepSwitch

    # node_name, spool_dir and proc_root are AgentSettings fields by the same name.
    agent = AgentSettings().with_flags(vars(args), _RENAMED)
    cfg = DeepConfig(args.node_name, args.operator_url, token, args.heartbeat_interval, agent)
    problem = check_environment()
    if problem:
        log.warning("deep profiling is off on this node: %s", problem)
    return DeepSwitch(cfg, problem=problem), None


def _error(problem: str) -> int:
    """Say `problem` on stderr, as every entry point does; the exit status of bad settings."""
    print(f"kubeprof agent --light: error: {problem}", file=sys.stderr, flush=True)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    from prometheus_client import start_http_server
    from prometheus_client.registry import CollectorRegistry

    from kubeprof.agent.light.exporter import WindowCollector
    from kubeprof.agent.light.pods import Resolver, list_node_pods, pod_names
    from kubeprof.agent.light.readings import ReadingError, RecordedSource, Source
    from kubeprof.agent.light.window import Window, attribute

    try:
        parser = build_parser()
    except ValueError as exc:  # an environment variable that does not parse
        return _error(str(exc))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    if not args.node_name:
        return _error(f"--node-name (env {AgentSettings.env_name('node_name')}) is required")
    host, _, port = args.listen.rpartition(":")
    if not port.isdigit():
        return _error(f"--listen {args.listen!r}: expected HOST:PORT")
    try:
        window = Window(args.window)
        source: Source
        if args.replay is not None:
            source = RecordedSource(args.replay)
        else:
            from kubeprof.agent.light.nvml_source import NvmlSource

            source = NvmlSource()
    except (ReadingError, ValueError, RuntimeError) as exc:
        return _error(str(exc))
    switch, problem = _deep_switch(args)
    if problem:
        return _error(problem)
    registry = CollectorRegistry()
    registry.register(WindowCollector(window, args.node_name))
    if switch is not None:
        from kubeprof.agent.light.deep import DeepCollector

        registry.register(DeepCollector(switch))
    try:
        start_http_server(int(port), addr=host or "0.0.0.0", registry=registry)
    except OSError as exc:  # the port is taken, or the address is not this host's
        return _error(f"--listen {args.listen}: {exc.strerror or exc}")
    resolver = Resolver(args.proc_root)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    next_pods = 0.0
    log.info("light agent on %s serving %s", args.node_name, args.listen)
    if switch is not None:
        threading.Thread(target=switch.run, args=(stop,), name="deep", daemon=True).start()
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
    if switch is not None:
        switch.stop_all(args.drain_timeout + 10)  # each session's last batches, then exit
    return 0
