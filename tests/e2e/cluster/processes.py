"""Start daemons with a log file and a pid file; stop exactly those PIDs later.

Nothing here ever looks processes up by name: a pid file is only acted on when /proc shows
the same executable we started, so a recycled PID is never signalled.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class ComponentError(RuntimeError):
    """A component failed to start or become ready; the message names it and its log."""


@dataclass(frozen=True)
class Proc:
    """A started daemon: its name, PID, executable and log file."""

    name: str
    pid: int
    exe: Path
    log: Path


def tail(log: Path, lines: int = 25) -> str:
    """Last lines of a log, for error messages."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start(name: str, argv: list[str], run_dir: Path, env: dict[str, str] | None = None) -> Proc:
    """Spawn argv detached (own session) so it outlives the CLI; record pid + exe."""
    logs, pids = run_dir / "logs", run_dir / "pids"
    logs.mkdir(parents=True, exist_ok=True)
    pids.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    with log.open("ab") as out:
        p = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=run_dir,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    _CHILDREN[p.pid] = p  # keep the handle: no "still running" ResourceWarning on GC
    exe = Path(argv[0]).resolve()
    (pids / f"{name}.pid").write_text(f"{p.pid}\n{exe}\n")
    return Proc(name, p.pid, exe, log)


def dies_with_parent(argv: list[str]) -> list[str]:
    """argv run under `setpriv --pdeathsig TERM` (util-linux): the child gets SIGTERM when
    the test process that started it dies without its teardown (an operator or Prometheus
    under test outlived a killed run). argv unchanged where setpriv is missing."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *argv] if setpriv else argv


def read_pidfile(pidfile: Path) -> tuple[int, Path] | None:
    """(pid, exe) from a pid file, or None when it is absent or garbled."""
    try:
        pid_s, exe_s = pidfile.read_text().split("\n")[:2]
        return int(pid_s), Path(exe_s)
    except (OSError, ValueError):
        return None


def is_ours(pid: int, exe: Path) -> bool:
    """True if pid is alive and still runs exe (guards against PID reuse). A child of ours
    found dead (stopped by a watchdog, or exited by itself) is reaped here: never waited
    for, it would stay a zombie and warn "still running" when its handle is collected."""
    try:
        running = Path(os.readlink(f"/proc/{pid}/exe"))
    except OSError:  # gone, or exiting: /proc drops exe before the zombie can be reaped
        child = _CHILDREN.get(pid)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(1)
                del _CHILDREN[pid]
        return False
    # A rebuilt binary shows up as "<path> (deleted)"; still the process we started.
    return str(running).removesuffix(" (deleted)") == str(exe)


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is not None:
            del _CHILDREN[pid]
        return
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop_pidfile(pidfile: Path, timeout: float = 15.0) -> bool:
    """SIGTERM the recorded PID, SIGKILL after timeout; remove the pid file. True if signalled."""
    rec = read_pidfile(pidfile)
    signalled = False
    if rec and is_ours(*rec):
        pid, exe = rec
        os.kill(pid, signal.SIGTERM)
        signalled = True
        deadline = time.monotonic() + timeout
        while is_ours(pid, exe) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.1)
        if is_ours(pid, exe):
            os.kill(pid, signal.SIGKILL)
            while is_ours(pid, exe):
                _reap(pid)
                time.sleep(0.05)
        _reap(pid)
    pidfile.unlink(missing_ok=True)
    return signalled


def wait_until(proc: Proc, check: Callable[[], bool], timeout: float, what: str = "ready") -> None:
    """Poll check() until true; raise ComponentError naming proc and its log otherwise."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        if not is_ours(proc.pid, proc.exe):
            raise ComponentError(
                f"{proc.name} (pid {proc.pid}) exited before becoming {what}; "
                f"log: {proc.log}\n--- last lines ---\n{tail(proc.log)}"
            )
        try:
            if check():
                return
        except Exception as e:  # noqa: BLE001 - any probe failure means "not yet"
            last_exc = e
        time.sleep(0.2)
    raise ComponentError(
        f"{proc.name} (pid {proc.pid}) not {what} after {timeout:.0f}s "
        f"(last probe error: {last_exc!r}); log: {proc.log}\n--- last lines ---\n{tail(proc.log)}"
    )
