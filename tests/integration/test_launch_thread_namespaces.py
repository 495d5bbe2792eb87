"""A tracer in its own pid namespace (a pod's) sends its threads' ids as that namespace
numbers them; the receiver must turn them into the host's, the ids CPU samples carry. Here a
real process in a new pid namespace (unshare, as root) runs a second thread, and
launch_threads maps both of its ids to the host's through /proc."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kubeprof.agent.gpu.launch_threads import host_tid, namespace_tids
from kubeprof.agent.gpu.stack_join import ConnState

CHILD = """
import os, sys, threading
t = threading.Thread(target=sys.stdin.read, daemon=True)  # waits until the test ends
t.start()
print(os.getpid(), threading.get_native_id(), t.native_id, flush=True)
t.join()
"""


def _host_pid(parent: int, ns_pid: int) -> int:
    """The host's pid of the process that ``parent`` (unshare) forked as ``ns_pid``."""
    for _ in range(100):
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            nspid = fields.get("NSpid", "").split()
            if fields.get("PPid", "").strip() == str(parent) and nspid[-1:] == [str(ns_pid)]:
                return int(entry.name)
        time.sleep(0.05)
    raise AssertionError(f"no child of {parent} numbered {ns_pid} in its namespace")


def test_a_pods_launching_threads_get_the_hosts_thread_ids():
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to make a pid namespace")
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ns_pid, ns_main, ns_worker = map(int, proc.stdout.readline().split())
        pid = _host_pid(proc.pid, ns_pid)
        assert pid != ns_pid  # a namespace of its own (its pid there is 1)
        host_tasks = {int(t) for t in os.listdir(f"/proc/{pid}/task")}
        ids = namespace_tids(pid)
        assert set(ids) == {ns_main, ns_worker} and set(ids.values()) == host_tasks
        assert ids[ns_main] == pid  # the main thread's id is the process's
        conn = ConnState(pid=pid, tracer_pid=ns_pid)  # what the receiver knows of it
        assert host_tid(conn, ns_worker) == ids[ns_worker] != ns_worker
    finally:
        proc.communicate("", timeout=30)
