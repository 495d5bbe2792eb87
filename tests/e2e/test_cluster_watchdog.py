"""The watchdog of the e2e fixtures: a killed test process leaves no control plane behind
(real processes, no cluster needed: a `sleep` stands in for etcd in the run folder)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.cluster import processes, watchdog


def _owner_and_component(run_dir: Path) -> tuple[subprocess.Popen[bytes], processes.Proc]:
    sleep = shutil.which("sleep")
    assert sleep
    owner = subprocess.Popen([sleep, "300"])  # the test process that "started" the cluster
    return owner, processes.start("etcd", [sleep, "300"], run_dir)  # etcd.pid, as `up` writes


def _gone_within(proc: processes.Proc, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while processes.is_ours(proc.pid, proc.exe) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not processes.is_ours(proc.pid, proc.exe)


def test_a_killed_owner_leaves_no_component_running(tmp_path: Path) -> None:
    owner, etcd = _owner_and_component(tmp_path)
    dog = watchdog.watch(owner=owner.pid, cluster=tmp_path)
    time.sleep(0.5)  # the watchdog has its pidfd
    assert processes.is_ours(etcd.pid, etcd.exe)  # nothing stopped while the owner lives
    owner.send_signal(signal.SIGKILL)  # no teardown runs
    owner.wait()
    assert _gone_within(etcd, 30), "the watchdog did not stop the owner's component"
    assert etcd.pid not in processes._CHILDREN  # our child, stopped by another: reaped
    assert dog.exited_within(30)
    assert not (tmp_path / "pids" / "etcd.pid").exists()  # as `down` leaves it


def test_a_cancelled_watchdog_stops_nothing(tmp_path: Path) -> None:
    owner, etcd = _owner_and_component(tmp_path)
    dog = watchdog.watch(owner=owner.pid, cluster=tmp_path)
    assert dog.cancel(), "the watchdog outlived its cancel"  # the fixture's own teardown
    owner.kill()
    owner.wait()
    time.sleep(0.5)
    assert processes.is_ours(etcd.pid, etcd.exe)
    assert processes.stop_pidfile(tmp_path / "pids" / "etcd.pid")


def test_an_owner_already_gone_is_handled_at_once(tmp_path: Path) -> None:
    owner, etcd = _owner_and_component(tmp_path)
    owner.kill()
    owner.wait()
    watchdog.watch(owner=owner.pid, cluster=tmp_path)
    assert _gone_within(etcd, 30)


def test_a_child_under_test_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """The operator, agents and Prometheus the tests start are children of the test process,
    not detached: `dies_with_parent` makes them go when it is killed."""
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys\n"
            "from tests.e2e.cluster import processes\n"
            "child = subprocess.Popen(processes.dies_with_parent(['sleep', '300']))\n"
            "open(sys.argv[1], 'w').write(str(child.pid))\n"
            "child.wait()\n",
            str(pid_file),
        ],
        cwd=watchdog.ROOT,
    )
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the parent never started its child"
        time.sleep(0.05)
    child = processes.Proc(
        "sleep", int(pid_file.read_text()), Path(shutil.which("sleep") or ""), pid_file
    )
    # the pid is setpriv's until it exec()s sleep (not yet, once, on a loaded machine)
    while not processes.is_ours(child.pid, child.exe):
        assert time.monotonic() < deadline, "setpriv never became sleep"
        time.sleep(0.05)
    assert _gone_within(child, 0.5) is False  # runs while its parent lives
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert _gone_within(child, 30), "the child outlived the test process that started it"
