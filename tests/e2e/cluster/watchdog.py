"""Stop what a test process started when that process dies before its teardown.

The control planes and PostgreSQL servers of the e2e tests run detached (their own session),
so a pytest process killed by a signal (a SIGTERM to the run, the OOM killer) leaves them
running: four kube-apiservers, etcds, controller-managers and a PostgreSQL were still up an
hour after such a run here, and every later run shared the 2 cores with them. `watch()`
starts a small detached process that waits for the owner's exit (a pidfd: no polling) and
then stops the cluster or server by its pid files, as `down` would. A teardown that runs
ends the watchdog first (`Watchdog.cancel`).

    python -m tests.e2e.cluster.watchdog OWNER_PID {--cluster RUN_DIR | --postgres PG_DIR}
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Watchdog:
    """A started watchdog (not this process's child: it forks away at once, so no Popen of
    it is left to warn "still running" when the test process exits before it does)."""

    pidfd: int | None  # None: it had exited before it could be opened

    def exited_within(self, seconds: float) -> bool:
        """Has the watchdog exited (waiting up to `seconds`)?"""
        if self.pidfd is None:
            return True
        return bool(select.select([self.pidfd], [], [], seconds)[0])

    def cancel(self) -> bool:
        """End the watchdog without it stopping anything; True once it has exited."""
        if self.pidfd is None:
            return True
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGTERM)
        gone = self.exited_within(5)
        os.close(self.pidfd)
        self.pidfd = None
        return gone


def watch(
    *, owner: int | None = None, cluster: Path | None = None, postgres: Path | None = None
) -> Watchdog:
    """Watch `owner` (this process by default): when it exits without `cancel()`, stop
    `cluster` (a control plane's run folder) or `postgres` (a `Postgres` folder)."""
    argv = [sys.executable, "-m", "tests.e2e.cluster.watchdog", str(owner or os.getpid())]
    if cluster is not None:
        argv += ["--cluster", str(cluster)]
    if postgres is not None:
        argv += ["--postgres", str(postgres)]
    started = subprocess.run(  # prints the forked watchdog's pid and exits
        argv,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C to the run's process group leaves it to teardown
        check=True,
        timeout=60,
    )
    try:
        return Watchdog(os.pidfd_open(int(started.stdout)))
    except ProcessLookupError:  # done already (an owner gone before it started)
        return Watchdog(None)


def _detach() -> None:
    """Fork: the parent prints the child's pid and exits; the child goes on, its output to
    /dev/null (the starter reads the pid until every copy of its pipe is closed)."""
    child = os.fork()
    if child:
        print(child, flush=True)
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)


def wait_for_exit(pid: int) -> None:
    """Return once process `pid` has exited (at once when it is gone already)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:  # no pidfd (a kernel before 5.3): look every second
        while Path(f"/proc/{pid}").exists():
            time.sleep(1)
        return
    try:
        select.select([fd], [], [])  # readable once the process has exited
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    """Wait for the owner, then stop what it left."""
    p = argparse.ArgumentParser(prog="python -m tests.e2e.cluster.watchdog")
    p.add_argument("owner", type=int)
    p.add_argument("--cluster", type=Path)
    p.add_argument("--postgres", type=Path)
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # cancelled: stop nothing
    _detach()
    wait_for_exit(a.owner)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up is not cut short
    if a.cluster is not None and a.cluster.is_dir():
        from .controlplane import Cluster

        Cluster(a.cluster).down()
    if a.postgres is not None and (a.postgres / "data").is_dir():
        from .postgres import Postgres

        Postgres(a.postgres).stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
