"""The node agent's switchboard (cluster/tracers.py) against real control sockets.

Each "pod" is a real child process serving a dormant tracer in its own folder (the pod's
emptyDir); the switchboard finds the sockets through ``/proc/<pid>/root`` of the pod's
processes and checks who listens with SO_PEERCRED, as on a node.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kubeprof.agent.cluster.tracers import TracerSwitchboard
from kubeprof.agent.gpu import control
from kubeprof.model import ProcessInfo

CTL = "ctl"  # the folder's name inside each fake pod's root (tmp/<pod>/ctl)

CHILD = """
import pathlib, sys
from kubeprof.agent.gpu import control
folder, fail = sys.argv[1], sys.argv[2]

class Live:
    def __init__(self, rx):
        self.rx = rx
    def stop(self):
        pass

def make(rx):
    if fail:
        raise RuntimeError(fail)
    return Live(rx)

d = control.DormantTracer(make, lambda t: print(t, file=sys.stderr, flush=True),
                          "/run/kubeprof/rx/gpu.sock")
s = control.ControlServer(pathlib.Path(folder) / control.socket_name(), d)
s.start()
print(s.path, flush=True)
sys.stdin.read()  # until the test closes stdin
s.close()
"""


@dataclass
class Pods:
    """Child processes, each a process of a pod; the folder is shared by a pod's processes."""

    root: Path
    procs: dict[int, ProcessInfo] = field(default_factory=dict)
    children: list[subprocess.Popen[str]] = field(default_factory=list)

    def folder(self, uid: str) -> Path:
        d = self.root / uid / CTL
        d.mkdir(parents=True, exist_ok=True)
        return d

    def start(self, uid: str, fail: str = "", folder: Path | None = None) -> Path:
        """A process of pod `uid` (serving in `folder`, default its pod's); its socket."""
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(folder or self.folder(uid)), fail],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.children.append(child)
        assert child.stdout is not None
        path = Path(child.stdout.readline().strip())
        self.procs[child.pid] = ProcessInfo(child.pid, 0, "python", "", "c", uid)
        return path

    def pod_of(self, pid: int) -> str:
        info = self.procs.get(pid)
        return info.pod_uid if info else ""


@pytest.fixture
def pods() -> Iterator[Pods]:
    root = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))  # short: socket paths <= 108
    p = Pods(root)
    yield p
    for c in p.children:
        if c.poll() is None:
            c.kill()
            c.wait(10)
        for pipe in (c.stdin, c.stdout):
            if pipe is not None:
                pipe.close()
    shutil.rmtree(root, ignore_errors=True)


def status(path: Path) -> str:
    return control.switch(path, "status")


class PerPodBoard(TracerSwitchboard):
    """The switchboard with each pod's folder at tmp/<pod uid>/ctl (in a cluster it is the
    same path in every pod, told apart by /proc/<pid>/root)."""

    def find(self, uid: str, pids):  # type: ignore[no-untyped-def]
        folder = Path(self.ctl_dir.replace("{pod}", uid))
        seen = {}
        for pid in pids:
            if (self.proc_root / str(pid) / "root").exists() and folder.is_dir():
                rel = folder.relative_to("/")
                d = self.proc_root / str(pid) / "root" / rel
                seen.update({p.name: p for p in d.iterdir() if p.name.endswith(".sock")})
        return seen


def board(pods: Pods, session: str = "sess-a") -> TracerSwitchboard:
    return PerPodBoard(session, str(pods.root / "{pod}" / CTL), pod_of=pods.pod_of)


def test_targets_on_others_untouched_and_all_off_at_the_end(pods: Pods) -> None:
    a1, a2 = pods.start("pod-a"), pods.start("pod-a")  # two processes of one pod
    b = pods.start("pod-b")
    sw = board(pods)
    sw.sync({"pod-a"}, pods.procs)
    assert status(a1) == status(a2) == "on sess-a" and status(b) == "dormant"
    sw.sync({"pod-a"}, pods.procs)  # idempotent: nothing re-sent
    late = pods.start("pod-a")  # a process started after the session did
    sw.sync({"pod-a", "pod-b"}, pods.procs)
    assert status(late) == "on sess-a" and status(b) == "on sess-a"
    sw.sync({"pod-b"}, pods.procs)  # pod-a left the selection
    assert status(a1) == status(a2) == status(late) == "dormant" and status(b) == "on sess-a"
    sw.all_off()
    assert status(b) == "dormant" and not sw.on
    states = {(s.pod_uid, s.state) for s in sw.states()}
    assert states == {("pod-a", "off"), ("pod-b", "off")}
    assert {s.pid for s in sw.states()} == {pid for pid in pods.procs}  # the real pids


def test_refusal_is_kept_with_its_reason_and_stale_sockets_are_skipped(pods: Pods) -> None:
    why = "no GPU: no /dev/nvidia<N> device in this process's view"
    sock = pods.start("pod-a", fail=why)
    (pods.folder("pod-a") / "99-deadbeef.sock").touch()  # a socket file whose process is gone
    sw = board(pods)
    sw.sync({"pod-a"}, pods.procs)
    sw.sync({"pod-a"}, pods.procs)
    assert sw.refused == {("pod-a", sock.name): why}
    assert not sw.on and status(sock).startswith("unsupported: no GPU")
    [state] = sw.states()
    assert (state.pod_uid, state.state, state.reason) == ("pod-a", "refused", why)
    assert sw.states(only_changed=True) == ()  # nothing new to report
    assert state.pid in pods.procs


def test_a_socket_planted_in_a_pods_folder_by_another_pod_is_not_switched(pods: Pods) -> None:
    """Pod A's folder holds a socket served by pod B's process (a symlink, or B writing
    there): the kernel says who listens, and the agent talks to no process of another pod."""
    a = pods.start("pod-a")
    b = pods.start("pod-b")
    (pods.folder("pod-a") / b.name).symlink_to(b)  # what a pod could point at another's
    planted = pods.start("pod-b", folder=pods.folder("pod-a"))
    sw = board(pods)
    sw.sync({"pod-a"}, pods.procs)
    assert list(sw.on) == [("pod-a", a.name)] and status(a) == "on sess-a"
    reasons = sorted(sw.refused.values())
    assert len(reasons) == 2 and all("of pod pod-b; not switched" in r for r in reasons)
    assert status(b) == "dormant" and status(planted) == "dormant"
    assert {s.state for s in sw.states() if s.pod_uid == "pod-a"} == {"on", "refused"}


def test_two_sessions_share_a_tracer_and_neither_switches_off_the_others(pods: Pods) -> None:
    sock = pods.start("pod-a")
    first, second = board(pods, "sess-a"), board(pods, "sess-b")
    first.sync({"pod-a"}, pods.procs)
    second.sync({"pod-a"}, pods.procs)
    assert status(sock) == "on sess-a +1"  # one stream, to the first holder's receiver
    second.all_off()  # session B ends while A still runs
    assert status(sock) == "on sess-a"
    second.sync({"pod-a"}, pods.procs)  # B selects the pod again (e.g. a new B agent)
    assert status(sock) == "on sess-a +1"
    first.all_off()  # A ends first: B keeps its tracer, and gets the stream
    assert status(sock).startswith("on sess-b")
    second.all_off()
    assert status(sock) == "dormant"


def test_stream_moves_to_the_next_holder_when_the_first_lets_go() -> None:
    made: list[str] = []
    stopped: list[str] = []

    class Live:
        def __init__(self, rx: str) -> None:
            self.rx = rx
            made.append(rx)

        def stop(self) -> None:
            stopped.append(self.rx)

    d = control.DormantTracer(Live, lambda t: None, "/run/kubeprof/rx/gpu.sock")
    assert d.on("a") == "ok on"
    assert d.on("b") == "ok on, streaming to a"
    assert d.off("b") == "ok off" and d.state == "on a"  # b never had the stream
    assert d.on("b").endswith("streaming to a")
    assert d.off("a") == "ok off, streaming to b"
    assert made == ["/run/kubeprof/rx/a.sock", "/run/kubeprof/rx/b.sock"]
    assert stopped == ["/run/kubeprof/rx/a.sock"]
    assert d.off("b") == "ok off" and d.state == "dormant"
    assert d.on("../../etc/x").startswith("error: bad session name")
    assert d.handle("off nobody") == "ok off"


def test_node_agent_switches_its_targets_on_while_running_and_off_at_the_end(
    pods: Pods, tmp_path: Path
) -> None:
    from kubeprof.agent.cluster.agent import AgentConfig, NodeAgent
    from kubeprof.agent.cluster.client import Answer, Outcome
    from kubeprof.agent.cluster.discovery import Discovery
    from kubeprof.agent.cluster.spool import Spool
    from kubeprof.model import Batch

    class Client:
        def targets(self, node: str) -> Answer:
            return Answer(Outcome.STORED, 200, "", {"phase": "Running", "pods": []})

        def post_batch(self, body: bytes, batch_id: str) -> Answer:
            return Answer(Outcome.STORED, 200, "", {"rows": 1})

    class Idle:
        def poll(self) -> Batch:
            return Batch()

        def stop(self) -> Batch:
            return Batch()

    class Seen(Discovery):
        def scan(self, targets):  # type: ignore[no-untyped-def]
            self.seen.update(pods.procs)
            return []

        def live(self) -> list[int]:
            return list(self.seen)

    target, other = pods.start("uid-t"), pods.start("uid-o")
    seen: list[str] = []
    now = [1000.0]

    def clock() -> float:
        seen.append(status(target))
        now[0] += 0.5
        return now[0]

    written: list[Batch] = []
    agent = NodeAgent(
        AgentConfig(
            "n",
            "ns",
            "s",
            poll_interval_s=0.001,
            rescan_interval_s=0,
            end_time=1003.0,
            static_targets=("uid-t",),
            drain_timeout_s=1,
        ),
        Client(),
        Spool(tmp_path / "spool"),
        {"idle": Idle()},
        Seen(),
        clock=clock,
        tracers=board(pods, "s-uid"),
    )
    write = agent.sink.write
    agent.sink.write = lambda b: (written.append(b), write(b))[1]  # type: ignore[method-assign]
    assert agent.run() == 0
    assert "on s-uid" in seen  # on while the session ran
    assert status(target) == "dormant" and status(other) == "dormant"  # off after; other never
    shipped = [(t.pod_uid, t.state) for b in written for t in b.gpu_tracers]
    assert shipped == [("uid-t", "on"), ("uid-t", "off")]  # what the session's status reads
