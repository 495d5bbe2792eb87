"""`kubeprof agent`: one node's agent for one ProfilingSession (what the DaemonSet runs)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from kubeprof.protocol.settings import AgentSettings, parse_collectors
from kubeprof.safe_text import escape_logs

DESCRIPTION = """\
Profile the target pods of one ProfilingSession on this node and ship the data to the
operator's ingest API. Target pods are asked from the API; their processes are found
through /proc/<pid>/cgroup (pod UID, container id). Every batch is spooled to disk before
it is sent and retried with backoff, so an API or database outage loses nothing.

Each flag falls back to the environment variable named in its help (the DaemonSet the
operator creates sets them), then to the default.
"""

EPILOG = """\
exit status: 0 all data delivered; 2 bad configuration; 3 data left in the spool
(a later agent on this node sends it).

example (by hand, outside Kubernetes):
  NODE_NAME=$(hostname) kubeprof agent --ingest-url http://operator:8080 \\
      --namespace ml-team --session trainer-profile --token-file ./token
"""


# One flag per AgentSettings field, each naming its variable: the repeated add_argument
# shape is declaration (as in light/main.py), not logic to share.
def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """Flags whose defaults are the settings in `environ` (os.environ by default)."""
    s = AgentSettings.from_env(os.environ if environ is None else environ)
    e = AgentSettings.env_name
    p = argparse.ArgumentParser(
        prog="kubeprof agent",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--node-name",
        default=s.node_name,
        help=f"this node's name; only pods on it are profiled (env {e('node_name')}, "
        "set from spec.nodeName by the downward API)",
    )
    p.add_argument(
        "--ingest-url",
        default=s.ingest_url,
        help="base URL of the operator's ingest API, e.g. "
        f"http://kubeprof-operator.kubeprof:8080 (env {e('ingest_url')})",
    )
    p.add_argument(
        "--namespace",
        default=s.namespace,
        help=f"namespace of the ProfilingSession (env {e('namespace')})",
    )
    p.add_argument(
        "--session", default=s.session, help=f"name of the ProfilingSession (env {e('session')})"
    )
    p.add_argument(
        "--session-uid",
        default=s.session_uid,
        help="UID of the ProfilingSession; the spool folder is keyed by it "
        f"(env {e('session_uid')})",
    )
    p.add_argument(
        "--token-file",
        type=Path,
        default=s.token_file,
        help="file holding the agent's ingest token, read at every request: its pod's "
        "projected ServiceAccount token (rotated by the kubelet), or the session's "
        f"shared token from its Secret (env {e('token_file')}, default %(default)s)",
    )
    p.add_argument(
        "--spool-dir",
        type=Path,
        default=s.spool_dir,
        help="where batches wait until the ingest stored them; a per-session "
        f"sub-folder is used (env {e('spool_dir')}, default %(default)s)",
    )
    p.add_argument(
        "--spool-max-mb",
        type=int,
        default=s.spool_max_mb,
        help="oldest batches are dropped (and counted) past this spool size "
        f"(env {e('spool_max_mb')}, default %(default)s)",
    )
    p.add_argument(
        "--proc-root",
        type=Path,
        default=s.proc_root,
        help=f"the host's /proc (the pod runs with hostPID) (env {e('proc_root')}, "
        "default %(default)s)",
    )
    p.add_argument(
        "--collectors",
        default=",".join(s.collectors),
        help="comma-separated collectors to run: cpu (eBPF sampler + Python "
        f"frames), nvml (GPU metrics) (env {e('collectors')}, default "
        "%(default)s)",
    )
    p.add_argument(
        "--hz",
        type=int,
        default=s.cpu_hz,
        help=f"CPU sampling frequency (env {e('cpu_hz')}, default %(default)s)",
    )
    p.add_argument(
        "--offcpu-min-us",
        type=int,
        default=s.offcpu_min_us,
        help="off-CPU waits shorter than this get no stack, only counted (env "
        f"{e('offcpu_min_us')}, default %(default)s)",
    )
    p.add_argument(
        "--offcpu-every",
        type=int,
        default=s.offcpu_every,
        help="follow 1 in N switch-outs for off-CPU waits; 0 turns the probe off "
        f"(env {e('offcpu_every')}, default %(default)s)",
    )
    p.add_argument(
        "--nvml-interval",
        type=float,
        default=s.nvml_interval_s,
        help=f"seconds between NVML readings (env {e('nvml_interval_s')}, default %(default)s)",
    )
    p.add_argument(
        "--poll-interval",
        type=float,
        default=s.poll_interval_s,
        help="seconds between collector polls, i.e. batch cadence (env "
        f"{e('poll_interval_s')}, default %(default)s)",
    )
    p.add_argument(
        "--rescan-interval",
        type=float,
        default=s.rescan_interval_s,
        help="seconds between target/process rescans (env "
        f"{e('rescan_interval_s')}, default %(default)s)",
    )
    p.add_argument(
        "--end-time",
        type=float,
        default=s.end_time,
        help="wall-clock end of the session as Unix seconds; the API's answer "
        f"overrides it (env {e('end_time')})",
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=s.drain_timeout_s,
        help="seconds to keep sending spooled batches at exit (env "
        f"{e('drain_timeout_s')}, default %(default)s)",
    )
    p.add_argument(
        "--pod-uid",
        action="append",
        default=[],
        help="profile this pod UID without asking the API for targets "
        "(repeatable; for use outside a session DaemonSet)",
    )
    p.add_argument(
        "--gpu-socket",
        default=s.gpu_socket,
        help="receive CUDA kernels from the dormant tracers the injection webhook "
        "put into pods: listen on this socket (its name, the session's uid, is "
        "what `on`/`off` carry) and switch the target pods' tracers on for the "
        f"session (env {e('gpu_socket')}; default off)",
    )
    p.add_argument(
        "--gpu-ctl-dir",
        default=s.gpu_ctl_dir,
        help="the folder, inside target pods, of their tracers' control sockets; "
        f"reached through /proc/<pid>/root (env {e('gpu_ctl_dir')}, "
        "default %(default)s)",
    )
    p.add_argument(
        "--log-level",
        default=s.log_level,
        help=f"DEBUG, INFO, WARNING (env {e('log_level')}, default %(default)s)",
    )
    return p


def _check(args: argparse.Namespace) -> str | None:
    """A one-line problem with the configuration, or None."""
    for flag, field in (
        ("--node-name", "node_name"),
        ("--ingest-url", "ingest_url"),
        ("--namespace", "namespace"),
        ("--session", "session"),
    ):
        value, env = getattr(args, field), AgentSettings.env_name(field)
        if not value:
            return f"{flag} is required (or set {env})"
    if not args.token_file.is_file():
        return (
            f"token file {args.token_file} not found: mount the session's Secret there "
            "or pass --token-file"
        )
    if not 1 <= args.hz <= 10_000:
        return f"--hz must be 1..10000, got {args.hz}"
    return None


# Flags whose destination differs from their AgentSettings field (the rest are the same).
_RENAMED = {
    "hz": "cpu_hz",
    "nvml_interval": "nvml_interval_s",
    "poll_interval": "poll_interval_s",
    "rescan_interval": "rescan_interval_s",
    "drain_timeout": "drain_timeout_s",
}


def _settings(args: argparse.Namespace) -> AgentSettings:
    """The settings the flags (each defaulting to its environment variable) spell."""
    flags = {**vars(args), "collectors": parse_collectors(args.collectors)}
    return AgentSettings().with_flags(flags, _RENAMED)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
    except ValueError as exc:  # an environment variable that does not parse
        print(f"kubeprof agent: error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    escape_logs()  # pod, process and tracer names in log lines are data, never control
    problem = _check(args)
    if problem:
        print(f"kubeprof agent: error: {problem}", file=sys.stderr)
        return 2

    from kubeprof.agent.cluster.assemble import build_node_agent
    from kubeprof.agent.cluster.client import TokenFile

    # Read at every request: a projected ServiceAccount token is rotated by the kubelet.
    agent = build_node_agent(
        _settings(args), TokenFile(args.token_file), static_targets=tuple(args.pod_uid)
    )

    def on_signal(signum: int, _frame: object) -> None:
        logging.getLogger("kubeprof.agent").info("signal %d: finishing", signum)
        agent.stop_event.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return agent.run()
