"""``python -m tests.e2e.cluster {build,up,down,status,env}`` for people and the Makefile.

Export lines go to stdout (so ``eval "$(python -m tests.e2e.cluster up)"`` works);
progress and errors go to stderr.
"""

import argparse
import shlex
import sys
import time
from pathlib import Path

from . import binaries, versions
from .controlplane import Cluster, ClusterError
from .postgres import Postgres


def _err(msg: str) -> None:
    print(f"kubeprof-cluster: {msg}", file=sys.stderr, flush=True)


def _exports(cluster: Cluster, pg: Postgres | None) -> str:
    lines = [f"export KUBECONFIG={shlex.quote(str(cluster.kubeconfig))}"]
    if pg is not None and pg.is_running():
        lines.append(f"export KUBEPROF_DATABASE_URL={shlex.quote(pg.url)}")
        lines.append(f"# psql {shlex.quote(pg.dsn)}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.e2e.cluster", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="build/cache the pinned binaries (no-op when cached)")
    for name, text in (
        ("up", "start control plane, kwok nodes and PostgreSQL; print export lines"),
        ("down", "stop what `up` started (by recorded PID)"),
        ("status", "say whether it runs; print export lines if so"),
        ("env", "print export lines only"),
    ):
        s = sub.add_parser(name, help=text)
        s.add_argument("--run-dir", type=Path, default=versions.default_run_dir())
        if name == "up":
            s.add_argument("--gpu-nodes", type=int, default=4)
            s.add_argument("--cpu-nodes", type=int, default=2)
            s.add_argument("--no-postgres", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    """Dispatch; returns the process exit status."""
    a = _parser().parse_args(argv)
    t0 = time.monotonic()
    if a.cmd == "build":
        b = binaries.ensure_built()
        _err(f"binaries ready in {time.monotonic() - t0:.0f}s: {b.kube_apiserver.parent}")
        return 0
    cluster = Cluster(a.run_dir)
    pg = Postgres(a.run_dir / "postgres")
    if a.cmd == "down":
        stopped = cluster.down()
        if pg.stop():
            stopped.append("postgres")
        _err(f"stopped: {', '.join(stopped) or 'nothing was running'}")
        return 0
    if a.cmd in ("status", "env"):
        running = cluster.is_running()
        if a.cmd == "status":
            _err(f"{'running' if running else 'not running'} (run folder {a.run_dir})")
        if running:
            print(_exports(cluster, pg))
        return 0 if running else 1
    cluster.gpu_nodes, cluster.cpu_nodes = a.gpu_nodes, a.cpu_nodes
    try:
        cluster.up()
        if not a.no_postgres:
            pg.start()
    except (ClusterError, RuntimeError) as e:
        _err(f"up failed: {e}")
        return 1
    _err(
        f"up in {time.monotonic() - t0:.1f}s: apiserver {cluster.server}, "
        f"{a.gpu_nodes} GPU + {a.cpu_nodes} CPU kwok nodes; logs in {a.run_dir / 'logs'}"
    )
    print(_exports(cluster, pg if not a.no_postgres else None))
    return 0
