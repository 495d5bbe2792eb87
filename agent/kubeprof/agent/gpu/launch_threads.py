"""When, and on which host thread, a GPU record's launch was called.

The tracer stamps each launch row (wire version 2) with the call's entry in host
CLOCK_MONOTONIC, the clock CPU samples are in (no offset to add, unlike CUPTI's
timestamps), and the calling thread's kernel id in the tracer's own pid namespace. In a pod
that namespace is the container's while CPU samples carry the host's ids, so the thread is
looked up in ``/proc/<host pid>/task/*/status`` (``NSpid``: the host's id first, the
innermost namespace's last). Rows of version 1 tracers have neither: the record keeps 0s.
"""

from __future__ import annotations

import os

from kubeprof.agent.gpu.stack_join import ConnState


def launch_of(conn: ConnState, corr: int) -> dict[str, int]:
    """``launch_ns``/``launch_tid`` of the launch with correlation id ``corr`` (GpuActivity
    fields), or nothing when that launch or its time was not recorded."""
    launch = conn.launches.get(corr)
    if launch is None or not launch[2]:
        return {}
    return {"launch_ns": launch[2], "launch_tid": host_tid(conn, launch[3])}


def host_tid(conn: ConnState, tid: int) -> int:
    """``tid`` (the tracer's namespace) as the host sees it; 0 when it cannot be told (the
    thread exited before it was looked up)."""
    if not tid or not conn.tracer_pid or conn.tracer_pid == conn.pid:
        return tid
    known = conn.host_tids.get(tid)
    if known is None:
        conn.host_tids.update(namespace_tids(conn.pid))  # on a miss: threads come and go
        known = conn.host_tids.setdefault(tid, 0)  # asked once, not per launch
    return known


def namespace_tids(pid: int, proc: str = "/proc") -> dict[int, int]:
    """{innermost namespace's thread id: host thread id} of process ``pid``'s threads."""
    out: dict[int, int] = {}
    try:
        tasks = os.listdir(f"{proc}/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        try:
            with open(f"{proc}/{pid}/task/{task}/status", encoding="ascii") as f:
                ids = next((ln.split()[1:] for ln in f if ln.startswith("NSpid:")), [])
        except (OSError, ValueError):
            continue
        if ids:
            out[int(ids[-1])] = int(ids[0])
    return out
