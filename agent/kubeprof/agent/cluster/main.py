"""`kubeprof agent`: one node's agent for one ProfilingSession (what the DaemonSet runs)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence

from kubeprof.agent.setting_flags import add_setting_flags
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


# (flag, AgentSettings field, help): each flag's default and type are the field's.
_SETTING_FLAGS = (
    (
        "--node-name",
        "node_name",
        "this node's name; only pods on it are profiled (env {env}, "
        "set from spec.nodeName by the downward API)",
    ),
    (
        "--ingest-url",
        "ingest_url",
        "base URL of the operator's ingest API, e.g. "
        "http://kubeprof-operator.kubeprof:8080 (env {env})",
    ),
    ("--namespace", "namespace", "namespace of the ProfilingSession (env {env})"),
    ("--session", "session", "name of the ProfilingSession (env {env})"),
    (
        "--session-uid",
        "session_uid",
        "UID of the ProfilingSession; the spool folder is keyed by it (env {env})",
    ),
    (
        "--token-file",
        "token_file",
        "file holding the agent's ingest token, read at every request: its pod's "
        "projected ServiceAccount token (rotated by the kubelet), or the session's "
        "shared token from its Secret (env {env}, default %(default)s)",
    ),
    (
        "--spool-dir",
        "spool_dir",
        "where batches wait until the ingest stored them; a per-session "
        "sub-folder is used (env {env}, default %(default)s)",
    ),
    (
        "--spool-max-mb",
        "spool_max_mb",
        "oldest batches are dropped (and counted) past this spool size "
        "(env {env}, default %(default)s)",
    ),
    (
        "--proc-root",
        "proc_root",
        "the host's /proc (the pod runs with hostPID) (env {env}, default %(default)s)",
    ),
    (
        "--collectors",
        "collectors",
        "comma-separated collectors to run: cpu (eBPF sampler + Python "
        "frames), nvml (GPU metrics) (env {env}, default %(default)s)",
    ),
    ("--hz", "cpu_hz", "CPU sampling frequency (env {env}, default %(default)s)"),
    (
        "--offcpu-min-us",
        "offcpu_min_us",
        "off-CPU waits shorter than this get no stack, only counted "
        "(env {env}, default %(default)s)",
    ),
    (
        "--offcpu-every",
        "offcpu_every",
        "follow 1 in N switch-outs for off-CPU waits; 0 turns the probe off "
        "(env {env}, default %(default)s)",
    ),
    (
        "--nvml-interval",
        "nvml_interval_s",
        "seconds between NVML readings (env {env}, default %(default)s)",
    ),
    (
        "--poll-interval",
        "poll_interval_s",
        "seconds between collector polls, i.e. batch cadence (env {env}, default %(default)s)",
    ),
    (
        "--rescan-interval",
        "rescan_interval_s",
        "seconds between target/process rescans (env {env}, default %(default)s)",
    ),
    (
        "--end-time",
        "end_time",
        "wall-clock end of the session as Unix seconds; the API's answer overrides it (env {env})",
    ),
    (
        "--drain-timeout",
        "drain_timeout_s",
        "seconds to keep sending spooled batches at exit (env {env}, default %(default)s)",
    ),
    (
        "--gpu-socket",
        "gpu_socket",
        "receive CUDA kernels from the dormant tracers the injection webhook "
        "put into pods: listen on this socket (its name, the session's uid, is "
        "what `on`/`off` carry) and switch the target pods' tracers on for the "
        "session (env {env}; default off)",
    ),
    (
        "--gpu-ctl-dir",
        "gpu_ctl_dir",
        "the folder, inside target pods, of their tracers' control sockets; "
        "reached through /proc/<pid>/root (env {env}, default %(default)s)",
    ),
    ("--log-level", "log_level", "DEBUG, INFO, WARNING (env {env}, default %(default)s)"),
)


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """Flags whose defaults are the settings in `environ` (os.environ by default)."""
    p = argparse.ArgumentParser(
        prog="kubeprof agent",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    settings = AgentSettings.from_env(os.environ if environ is None else environ)
    add_setting_flags(p, settings, _SETTING_FLAGS)
    p.add_argument(
        "--pod-uid",
        action="append",
        default=[],
        help="profile this pod UID without asking the API for targets "
        "(repeatable; for use outside a session DaemonSet)",
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
