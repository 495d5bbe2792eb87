"""The launcher's process handling: PID-exact stop, clear errors (no cluster needed)."""

import os
import shutil
from pathlib import Path

import pytest

from tests.e2e.cluster import processes
from tests.e2e.cluster.processes import ComponentError


def test_stop_kills_exactly_the_recorded_pid(tmp_path: Path) -> None:
    sleep = shutil.which("sleep")
    assert sleep
    proc = processes.start("sleeper", [sleep, "60"], tmp_path)
    assert processes.is_ours(proc.pid, proc.exe)
    pidfile = tmp_path / "pids" / "sleeper.pid"
    assert processes.stop_pidfile(pidfile) is True
    assert not processes.is_ours(proc.pid, proc.exe)
    assert not pidfile.exists()
    assert processes.stop_pidfile(pidfile) is False  # second down is a no-op


def test_recycled_pid_is_never_signalled(tmp_path: Path) -> None:
    """A pid file whose PID now runs another program (here: pytest itself) is left alone."""
    pidfile = tmp_path / "other.pid"
    pidfile.write_text(f"{os.getpid()}\n/usr/bin/definitely-not-this\n")
    assert processes.stop_pidfile(pidfile) is False
    assert not pidfile.exists()


def test_early_exit_names_component_and_log(tmp_path: Path) -> None:
    sh = shutil.which("sh")
    assert sh
    proc = processes.start("flaky", [sh, "-c", "echo port already in use; exit 3"], tmp_path)
    with pytest.raises(ComponentError) as err:
        processes.wait_until(proc, lambda: False, timeout=10)
    msg = str(err.value)
    assert "flaky" in msg and str(proc.log) in msg and "port already in use" in msg
    # reaped when found dead: no zombie, no "still running" warning when its handle goes
    assert proc.pid not in processes._CHILDREN
    with pytest.raises(ChildProcessError):
        os.waitpid(proc.pid, os.WNOHANG)
