"""The node agent's switchboard (cluster/tracers.py) against real control sockets."""

from __future__ import annotations

from pathlib import Path

from kubeprof.agent.cluster.tracers import TracerSwitchboard
from kubeprof.agent.gpu import control


class Live:
    stopped = 0

    def stop(self) -> None:
        Live.stopped += 1


def serve(
    gpu_sock: str, uid: str, pid: int, make=Live
) -> tuple[control.DormantTracer, control.ControlServer]:
    d = control.DormantTracer(make, lambda t: None)
    s = control.ControlServer(control.control_dir(gpu_sock, uid) / f"{pid}.sock", d)
    s.start()
    return d, s


def test_targets_on_others_untouched_and_all_off_at_the_end(tmp_path: Path) -> None:
    gpu = str(tmp_path / "gpu.sock")
    a1, sa1 = serve(gpu, "pod-a", 10)
    a2, sa2 = serve(gpu, "pod-a", 11)
    b, sb = serve(gpu, "pod-b", 10)
    board = TracerSwitchboard(gpu)
    try:
        board.sync({"pod-a"})
        assert a1.state == a2.state == "on" and b.state == "dormant"
        board.sync({"pod-a"})  # idempotent: nothing re-sent
        late, sl = serve(gpu, "pod-a", 12)  # a process started after the session did
        board.sync({"pod-a", "pod-b"})
        assert late.state == "on" and b.state == "on"
        board.sync({"pod-b"})  # pod-a left the selection
        assert a1.state == a2.state == late.state == "dormant" and b.state == "on"
        board.all_off()
        assert b.state == "dormant" and not board.on
        sl.close()
    finally:
        for s in (sa1, sa2, sb):
            s.close()


def test_refusal_is_kept_with_its_reason_and_stale_sockets_are_skipped(tmp_path: Path) -> None:
    gpu = str(tmp_path / "gpu.sock")

    def no_gpu():
        raise RuntimeError("no GPU: no /dev/nvidia<N> device in this process's view")

    d, s = serve(gpu, "pod-a", 10, no_gpu)
    stale = control.control_dir(gpu, "pod-a") / "99.sock"
    stale.touch()  # a socket file whose process is gone
    board = TracerSwitchboard(gpu, timeout_s=0.5)
    try:
        board.sync({"pod-a"})
        board.sync({"pod-a"})
        assert board.refused == {s.path: "no GPU: no /dev/nvidia<N> device in this process's view"}
        assert not board.on and d.state.startswith("unsupported")
    finally:
        s.close()


def test_node_agent_switches_its_targets_on_while_running_and_off_at_the_end(
    tmp_path: Path,
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

    gpu = str(tmp_path / "gpu.sock")
    target, st = serve(gpu, "uid-t", 5)
    other, so = serve(gpu, "uid-o", 5)
    seen: list[str] = []
    now = [1000.0]

    def clock() -> float:
        seen.append(target.state)
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
            static_targets=("uid-t",),
            drain_timeout_s=1,
        ),
        Client(),
        Spool(tmp_path / "spool"),
        {"idle": Idle()},
        Discovery(tmp_path / "proc"),
        clock=clock,
        tracers=TracerSwitchboard(gpu),
    )
    try:
        assert agent.run() == 0
        assert "on" in seen  # on while the session ran
        assert target.state == "dormant" and other.state == "dormant"  # off after; other never
        assert target.switches == 1 and other.switches == 0
    finally:
        st.close()
        so.close()
