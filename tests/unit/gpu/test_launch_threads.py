"""Which host thread made a launch: a tracer in a pod sends its own namespace's thread ids,
the receiver turns them into the host's (the ids CPU samples carry)."""

from __future__ import annotations

import os
import threading

from kubeprof.agent.gpu import launch_threads
from kubeprof.agent.gpu.launch_threads import host_tid, launch_of, namespace_tids
from kubeprof.agent.gpu.stack_join import ConnState


def _proc(tmp_path, pid: int, tasks: dict[str, str]) -> str:
    for task, nspid in tasks.items():
        d = tmp_path / str(pid) / "task" / task
        d.mkdir(parents=True)
        (d / "status").write_text(f"Name:\tpython\nTgid:\t{pid}\nNSpid:\t{nspid}\nPPid:\t1\n")
    return str(tmp_path)


def test_this_process_threads_map_to_themselves():
    assert namespace_tids(os.getpid())[threading.get_native_id()] == threading.get_native_id()


def test_a_pods_thread_ids_map_to_the_hosts(tmp_path, monkeypatch):
    proc = _proc(tmp_path, 4100, {"4100": "4100\t1", "4107": "4107\t7", "4200": "4200"})
    assert namespace_tids(4100, proc) == {1: 4100, 7: 4107, 4200: 4200}
    assert namespace_tids(9999, proc) == {}
    real = launch_threads.namespace_tids
    calls = []

    def counted(pid: int) -> dict[int, int]:
        calls.append(pid)
        return real(pid, proc)

    monkeypatch.setattr(launch_threads, "namespace_tids", counted)
    conn = ConnState(pid=4100, tracer_pid=1)  # the host's pid, and the pod's own
    conn.launches[5] = (3, 2, 123_456, 7)
    conn.launches[6] = (3, 2, 0, 0)  # a version 1 tracer's row
    assert launch_of(conn, 5) == {"launch_ns": 123_456, "launch_tid": 4107}
    assert launch_of(conn, 6) == {} and launch_of(conn, 99) == {}
    assert host_tid(conn, 8) == 0 and host_tid(conn, 8) == 0  # exited: not guessed
    assert calls == [4100, 4100]  # one read per unknown id, not per launch
    same = ConnState(pid=4100, tracer_pid=4100)  # one namespace: ids as sent
    assert host_tid(same, 4107) == 4107 and calls == [4100, 4100]
