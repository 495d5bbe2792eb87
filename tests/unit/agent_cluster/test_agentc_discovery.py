"""Target pods -> processes, over a fake /proc tree; and the agent's per-pass steps."""

from pathlib import Path

from kubeprof.agent.cluster.agent import AgentConfig, NodeAgent
from kubeprof.agent.cluster.client import Answer, Outcome
from kubeprof.agent.cluster.discovery import Discovery
from kubeprof.agent.cluster.spool import Spool
from kubeprof.agent.driver import merge
from kubeprof.model import Batch, CpuSample, ProcessInfo

UID_A = "11111111-2222-3333-4444-555555555555"
UID_B = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def _proc(root: Path, pid: int, comm: str, cgroup: str, ppid: int = 1) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "cgroup").write_text(cgroup)
    (d / "stat").write_text(f"{pid} ({comm}) S {ppid} 0 0\n")
    (d / "cmdline").write_bytes(comm.encode() + b"\0--flag\0")


def _cg(uid: str, cid: str) -> str:
    return (
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
        f"{uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n"
    )


def test_scan_finds_only_target_pods_and_reports_new_once(tmp_path: Path):
    _proc(tmp_path, 100, "python (w1)", _cg(UID_A, "a" * 64))
    _proc(tmp_path, 200, "nginx", _cg(UID_B, "b" * 64))
    _proc(tmp_path, 300, "sshd", "0::/system.slice/ssh.service\n")
    (tmp_path / "self").mkdir()
    d = Discovery(tmp_path)
    found = d.scan([UID_A])
    assert [(p.pid, p.name, p.pod_uid, p.container_id, p.ppid) for p in found] == [
        (100, "python (w1)", UID_A, "a" * 64, 1)
    ]
    assert found[0].cmdline == "python (w1) --flag"
    assert d.scan([UID_A]) == []
    _proc(tmp_path, 101, "worker", _cg(UID_A, "a" * 64), ppid=100)
    assert [p.pid for p in d.scan([UID_A])] == [101]
    (tmp_path / "101" / "cgroup").unlink()
    (tmp_path / "101" / "stat").unlink()
    (tmp_path / "101" / "cmdline").unlink()
    (tmp_path / "101").rmdir()
    assert d.live() == [100]


class FakeClient:
    def __init__(self, pods: list[str], phase: str = "Running") -> None:
        self.pods, self.phase, self.bodies = pods, phase, []

    def targets(self, node: str) -> Answer:
        return Answer(
            Outcome.STORED,
            200,
            "",
            {"phase": self.phase, "endTime": 123.0, "pods": [{"uid": u} for u in self.pods]},
        )

    def post_batch(self, body: bytes, batch_id: str) -> Answer:
        self.bodies.append(body)
        return Answer(Outcome.STORED, 200, "", {"rows": 1})


class FakeCollector:
    def __init__(self) -> None:
        self.targets: list[int] = []

    def add_target(self, pid: int) -> None:
        self.targets.append(pid)

    def poll(self) -> Batch:
        return Batch(processes=(ProcessInfo(100, 1, "python", "python"),), counters={"x": 1})

    def stop(self) -> Batch:
        return Batch()


def test_agent_pass_attaches_and_stamps_pod_identity(tmp_path: Path):
    proc = tmp_path / "proc"
    _proc(proc, 100, "python", _cg(UID_A, "c" * 64))
    col = FakeCollector()
    agent = NodeAgent(
        AgentConfig("node-1", "ns", "s"),
        FakeClient([UID_A]),
        Spool(tmp_path / "spool"),
        {"cpu": col},
        Discovery(proc),
    )
    agent.refresh_targets()
    assert agent.targets == {UID_A} and agent.config.end_time == 123.0
    agent.attach_new()
    assert col.targets == [100]
    enriched = agent.sink.enrich(col.poll())
    assert enriched.processes[0].pod_uid == UID_A
    assert enriched.processes[0].container_id == "c" * 64


def test_agent_stops_when_session_leaves_running(tmp_path: Path):
    client = FakeClient([UID_A], phase="Aggregating")
    agent = NodeAgent(
        AgentConfig("n", "ns", "s", end_time=None, drain_timeout_s=1),
        client,
        Spool(tmp_path / "spool"),
        {"cpu": FakeCollector()},
        Discovery(tmp_path / "proc"),
    )
    agent.refresh_targets()
    assert agent.should_stop()


def test_merge_concatenates_and_sums_counters():
    s = CpuSample(1, 1, 1, "t", 0, ())
    m = merge([Batch(samples=(s,), counters={"a": 1}), Batch(samples=(s,), counters={"a": 2})])
    assert len(m.samples) == 2 and m.counters == {"a": 3}


def test_gpu_processes_are_described_once_with_their_pod(tmp_path: Path):
    from kubeprof.model import GpuMetricSample

    proc = tmp_path / "proc"
    _proc(proc, 500, "trainer", _cg(UID_B, "d" * 64))
    agent = NodeAgent(
        AgentConfig("n", "ns", "s"), FakeClient([]), Spool(tmp_path / "spool"), {}, Discovery(proc)
    )
    b = Batch(
        gpu_metrics=(
            GpuMetricSample(1, 0, "sm_util", 50.0, pid=500),
            GpuMetricSample(1, 0, "gpu_util_pct", 50.0),
        )
    )
    first = agent.sink.enrich(b)
    assert [(p.pid, p.pod_uid) for p in first.processes] == [(500, UID_B)]
    assert agent.sink.enrich(b).processes == ()


def test_run_until_end_time_then_drain_everything(tmp_path: Path):
    proc = tmp_path / "proc"
    _proc(proc, 100, "python", _cg(UID_A, "c" * 64))
    client = FakeClient([])
    col = FakeCollector()
    now = [1000.0]

    def clock() -> float:
        now[0] += 0.5
        return now[0]

    agent = NodeAgent(
        AgentConfig(
            "n",
            "ns",
            "s",
            poll_interval_s=0.001,
            rescan_interval_s=0,
            end_time=1003.0,
            static_targets=(UID_A,),
        ),
        client,
        Spool(tmp_path / "spool"),
        {"cpu": col},
        Discovery(proc),
        clock=clock,
    )
    assert agent.run() == 0
    assert col.targets == [100] and agent.batches >= 2
    assert agent.spool.pending() == [] and len(client.bodies) == agent.batches
