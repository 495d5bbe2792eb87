"""`kubeprof agent`: one node's agent for one ProfilingSession (what the DaemonSet runs)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

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


def _env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kubeprof agent", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--node-name", default=_env("NODE_NAME"),
                   help="this node's name; only pods on it are profiled (env NODE_NAME, "
                        "set from spec.nodeName by the downward API)")
    p.add_argument("--ingest-url", default=_env("KUBEPROF_INGEST_URL"),
                   help="base URL of the operator's ingest API, e.g. "
                        "http://kubeprof-operator.kubeprof:8080 (env KUBEPROF_INGEST_URL)")
    p.add_argument("--namespace", default=_env("KUBEPROF_SESSION_NAMESPACE"),
                   help="namespace of the ProfilingSession (env KUBEPROF_SESSION_NAMESPACE)")
    p.add_argument("--session", default=_env("KUBEPROF_SESSION"),
                   help="name of the ProfilingSession (env KUBEPROF_SESSION)")
    p.add_argument("--token-file", type=Path,
                   default=Path(_env("KUBEPROF_TOKEN_FILE", "/var/run/kubeprof/token")),
                   help="file holding the session's ingest token, mounted from the "
                        "session's Secret (env KUBEPROF_TOKEN_FILE, default %(default)s)")
    p.add_argument("--spool-dir", type=Path,
                   default=Path(_env("KUBEPROF_SPOOL_DIR", "/var/lib/kubeprof/spool")),
                   help="where batches wait until the ingest stored them; a per-session "
                        "sub-folder is used (env KUBEPROF_SPOOL_DIR, default %(default)s)")
    p.add_argument("--spool-max-mb", type=int, default=int(_env("KUBEPROF_SPOOL_MAX_MB", "1024")),
                   help="oldest batches are dropped (and counted) past this spool size "
                        "(env KUBEPROF_SPOOL_MAX_MB, default %(default)s)")
    p.add_argument("--proc-root", type=Path, default=Path(_env("KUBEPROF_PROC_ROOT", "/proc")),
                   help="the host's /proc (the pod runs with hostPID) (env "
                        "KUBEPROF_PROC_ROOT, default %(default)s)")
    p.add_argument("--collectors", default=_env("KUBEPROF_COLLECTORS", "cpu"),
                   help="comma-separated collectors to run: cpu (eBPF sampler + Python "
                        "frames), nvml (GPU metrics) (env KUBEPROF_COLLECTORS, default "
                        "%(default)s)")
    p.add_argument("--hz", type=int, default=int(_env("KUBEPROF_CPU_HZ", "99")),
                   help="CPU sampling frequency (env KUBEPROF_CPU_HZ, default %(default)s)")
    p.add_argument("--nvml-interval", type=float,
                   default=float(_env("KUBEPROF_NVML_INTERVAL_S", "1.0")),
                   help="seconds between NVML readings (env KUBEPROF_NVML_INTERVAL_S, "
                        "default %(default)s)")
    p.add_argument("--poll-interval", type=float,
                   default=float(_env("KUBEPROF_POLL_INTERVAL_S", "1.0")),
                   help="seconds between collector polls, i.e. batch cadence (env "
                        "KUBEPROF_POLL_INTERVAL_S, default %(default)s)")
    p.add_argument("--rescan-interval", type=float,
                   default=float(_env("KUBEPROF_RESCAN_INTERVAL_S", "5.0")),
                   help="seconds between target/process rescans (env "
                        "KUBEPROF_RESCAN_INTERVAL_S, default %(default)s)")
    p.add_argument("--end-time", type=float,
                   default=float(_env("KUBEPROF_SESSION_END", "0")) or None,
                   help="wall-clock end of the session as Unix seconds; the API's answer "
                        "overrides it (env KUBEPROF_SESSION_END)")
    p.add_argument("--drain-timeout", type=float,
                   default=float(_env("KUBEPROF_DRAIN_TIMEOUT_S", "60")),
                   help="seconds to keep sending spooled batches at exit (env "
                        "KUBEPROF_DRAIN_TIMEOUT_S, default %(default)s)")
    p.add_argument("--pod-uid", action="append", default=[],
                   help="profile this pod UID without asking the API for targets "
                        "(repeatable; for use outside a session DaemonSet)")
    p.add_argument("--log-level", default=_env("KUBEPROF_LOG_LEVEL", "INFO"),
                   help="DEBUG, INFO, WARNING (env KUBEPROF_LOG_LEVEL, default %(default)s)")
    return p


def _check(args: argparse.Namespace) -> str | None:
    """A one-line problem with the configuration, or None."""
    for flag, env, value in (("--node-name", "NODE_NAME", args.node_name),
                             ("--ingest-url", "KUBEPROF_INGEST_URL", args.ingest_url),
                             ("--namespace", "KUBEPROF_SESSION_NAMESPACE", args.namespace),
                             ("--session", "KUBEPROF_SESSION", args.session)):
        if not value:
            return f"{flag} is required (or set {env})"
    if not args.token_file.is_file():
        return (f"token file {args.token_file} not found: mount the session's Secret there "
                "or pass --token-file")
    if not 1 <= args.hz <= 10_000:
        return f"--hz must be 1..10000, got {args.hz}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    problem = _check(args)
    if problem:
        print(f"kubeprof agent: error: {problem}", file=sys.stderr)
        return 2

    from kubeprof.agent import collectors
    from kubeprof.agent.cluster.agent import AgentConfig, NodeAgent, read_token
    from kubeprof.agent.cluster.client import IngestClient
    from kubeprof.agent.cluster.discovery import Discovery
    from kubeprof.agent.cluster.spool import Spool

    config = AgentConfig(node=args.node_name, namespace=args.namespace, session=args.session,
                         poll_interval_s=args.poll_interval,
                         rescan_interval_s=args.rescan_interval, end_time=args.end_time,
                         drain_timeout_s=args.drain_timeout, static_targets=tuple(args.pod_uid))
    client = IngestClient(args.ingest_url, args.namespace, args.session,
                          read_token(args.token_file))
    spool = Spool(args.spool_dir / f"{args.namespace}_{args.session}",
                  max_bytes=args.spool_max_mb << 20)
    names = [n.strip() for n in args.collectors.split(",") if n.strip()]
    started = collectors.start(
        names, collectors.CollectorOptions(hz=args.hz, nvml_interval_s=args.nvml_interval))
    running, failed = started.running, started.failed
    agent = NodeAgent(config, client, spool, running, Discovery(args.proc_root))
    for note in started.notes:
        logging.getLogger("kubeprof.agent").warning("%s", note)
    if failed:
        agent.sink.write(collectors_failed_batch(failed))

    def on_signal(signum: int, _frame: object) -> None:
        logging.getLogger("kubeprof.agent").info("signal %d: finishing", signum)
        agent.stop_event.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    logging.getLogger("kubeprof.agent").info(
        "agent for %s/%s on node %s: collectors %s%s", args.namespace, args.session,
        args.node_name, ",".join(running) or "none",
        f" (off: {', '.join(failed)})" if failed else "")
    return agent.run()


def collectors_failed_batch(failed: Mapping[str, object]):  # noqa: ANN201 - Batch, lazily imported
    """A counters-only batch telling the operator which collectors could not start."""
    from kubeprof.model import Batch

    return Batch(counters={f"collector_off_{name}": 1 for name in failed})
