"""Handing sessions to deep-capable light agents: the pure placement, the operator's table
and reconcile pass, the heartbeat contract, and the light agent's switch."""

from __future__ import annotations

import copy
import threading

import pytest

from kubeprof.agent.light.deep import DeepConfig, DeepSwitch
from kubeprof.operator.light_deep import (
    LightAgents,
    Placement,
    Seen,
    hand_over,
    place,
    status_fields,
)
from kubeprof.operator.phases import Phase
from kubeprof.operator.reconcile import reconcile
from kubeprof.operator.spec import parse
from kubeprof.protocol.light import Answer, Assignment, Heartbeat, LightWireError
from tests.unit.operator.test_op_reconcile import BODY, _pod
from tests.unit.operator.test_op_reconcile import env as env

DEEP = Heartbeat("a", True)


def seen(**agents: tuple[Heartbeat, float]) -> dict[str, Seen]:
    return {n: Seen(hb, at) for n, (hb, at) in agents.items()}


# -- the pure decision ---------------------------------------------------------------------
def test_a_fresh_deep_agent_takes_its_node_and_the_rest_stays_on_the_daemonset() -> None:
    p = place(["b", "a", "c"], seen(a=(DEEP, 95.0)), now=100.0, stale_s=20)
    assert (p.ds_nodes, p.light_nodes, p.fallback) == (["b", "c"], ["a"], {})


def test_a_silent_or_shallow_agent_falls_back_and_says_why() -> None:
    shallow = Heartbeat("b", False, "no permission to load BPF programs (CAP_BPF missing)")
    p = place(
        ["a", "b"], seen(a=(Heartbeat("a", True), 70.0), b=(shallow, 99.0)), now=100.0, stale_s=20
    )
    assert p.light_nodes == [] and p.ds_nodes == ["a", "b"]
    assert p.fallback == {
        "a": "light agent not heard from for 30s",
        "b": "no permission to load BPF programs (CAP_BPF missing)",
    }


def test_a_node_already_in_the_daemonset_stays_there() -> None:
    p = place(["a"], seen(a=(DEEP, 99.0)), now=100.0, stale_s=20, in_ds=["a"])
    assert (p.ds_nodes, p.light_nodes, p.fallback) == (["a"], [], {})


def test_status_counts_and_names_a_few_fallback_nodes_only() -> None:
    many = {f"n{i:03d}": "light agent not heard from for 60s" for i in range(500)}
    p = Placement(["x"], ["a"], many)
    st = status_fields(p, "2026-01-01T00:00:00Z", [])
    assert st["lightAgents"] == {"nodes": 1, "running": 0, "fallbackNodes": 500}
    msg = st["lightCondition"]["message"]
    assert "n000, n001, n002 and 497 more" in msg and len(msg) < 300
    assert st["lightCondition"]["reason"] == "FellBack"


# -- the heartbeat contract -------------------------------------------------------------------
def test_heartbeat_and_answer_round_trip_and_the_token_never_prints() -> None:
    hb = Heartbeat("node-a", True, "", ("u1",))
    assert Heartbeat.from_json(hb.to_json()) == hb
    a = Assignment("ml", "s", "u1", "SECRET-TOKEN", ("cpu", "nvml"), 49, 0.5, 12.5)
    ans = Answer((a,), ("u0",))
    assert Answer.from_json(ans.to_json()) == ans
    assert "SECRET-TOKEN" not in repr(ans) and "SECRET-TOKEN" not in str(a)


@pytest.mark.parametrize(
    "bad,field",
    [
        ({"deep": True}, "node"),
        ({"node": "a", "deep": "yes"}, "deep"),
        ({"node": "a", "deep": True, "running": ["x" * 65]}, "running"),
        ({"node": "a" * 254, "deep": True}, "node"),
        ([], "heartbeat"),
    ],
)
def test_a_bad_heartbeat_names_its_field(bad, field) -> None:
    with pytest.raises(LightWireError, match=field):
        Heartbeat.from_json(bad)


# -- the operator's table and a reconcile pass ---------------------------------------------------
def _light(clock: list[float], grace: float = 0.0) -> LightAgents:
    return LightAgents("light-token", stale_s=20, grace_s=grace, clock=lambda: clock[0])


def test_reconcile_hands_node_a_to_its_light_agent_and_pins_the_daemonset_to_b(env) -> None:
    ctx, kube, _clock, _ = env
    mono = [1000.0]
    ctx.light = _light(mono)
    ctx.light.report(Heartbeat("n1", True))
    kube.pods = [_pod("p1", "n1", "uid-p1"), _pod("p2", "n2", "uid-p2")]
    body = copy.deepcopy(BODY)
    st = reconcile(ctx, body)
    body["status"] = st
    terms = kube.objects["daemonsets/kubeprof-s-agent"]["spec"]["template"]["spec"]["affinity"][
        "nodeAffinity"
    ]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [t["matchFields"][0]["values"] for t in terms] == [["n2"]]
    assert st["lightAgents"] == {"nodes": 1, "running": 0, "fallbackNodes": 0}
    # the light agent, not started yet, and one DaemonSet agent pinned to n2 (no pod yet)
    assert st["agents"] == {"ready": 0, "expected": 2, "daemonSets": 1}
    entry = ctx.writer_registry.get("ml", "s")
    ans = ctx.light.answer("n1", ctx.writer_registry)
    (a,) = ans.assignments
    assert (a.namespace, a.session, a.uid, a.token) == ("ml", "s", "uid-session-1", entry.token)
    assert a.collectors == ("cpu", "nvml") and not ans.revoked
    # n2 is the DaemonSet's: a light agent there (none yet) must not run the session.
    assert ctx.light.answer("n2", ctx.writer_registry) == Answer((), ("uid-session-1",))
    assert entry.token not in repr(st)

    # The light agent reports it runs the session: counted as a ready agent.
    ctx.light.report(Heartbeat("n1", True, "", ("uid-session-1",)))
    st = reconcile(ctx, body)
    body["status"] = st
    assert st["lightAgents"]["running"] == 1
    assert st["agents"] == {"ready": 1, "expected": 2, "daemonSets": 1}
    cond = {c["type"]: c for c in st["conditions"]}["LightAgents"]
    assert cond["status"] == "True" and cond["reason"] == "HandedOver"

    # The light agent dies: after the stale time n1 falls back to the DaemonSet, the status
    # says why, and n1 is revoked so a revived light agent stops rather than doubling up.
    mono[0] += 30
    st = reconcile(ctx, body)
    body["status"] = st
    terms = kube.objects["daemonsets/kubeprof-s-agent"]["spec"]["template"]["spec"]["affinity"][
        "nodeAffinity"
    ]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [t["matchFields"][0]["values"] for t in terms] == [["n1"], ["n2"]]
    cond = {c["type"]: c for c in st["conditions"]}["LightAgents"]
    assert cond["status"] == "False" and "n1" in cond["message"]
    assert "not heard from for 30s" in cond["message"]
    ctx.light.report(Heartbeat("n1", True, "", ("uid-session-1",)))
    assert ctx.light.answer("n1", ctx.writer_registry) == Answer((), ("uid-session-1",))
    st = reconcile(ctx, body)  # back, but n1 stays with the DaemonSet for this session
    assert st["lightAgents"]["nodes"] == 0


def test_after_an_operator_restart_placement_waits_for_the_agents_then_resends(env) -> None:
    ctx, kube, _clock, _ = env
    mono = [1000.0]
    kube.pods = [_pod("p1", "n1", "uid-p1"), _pod("p2", "n2", "uid-p2")]
    body = copy.deepcopy(BODY)
    ctx.light = _light(mono)
    ctx.light.report(Heartbeat("n1", True))
    body["status"] = reconcile(ctx, body)
    first = ctx.light.answer("n1", ctx.writer_registry)

    # Restart: empty table, within the grace. The DaemonSet keeps [n2]; nothing is
    # assigned or revoked, so the light agent keeps running what it runs.
    ctx.light = _light(mono, grace=15)
    st = reconcile(ctx, body)
    body["status"] = st
    ds = kube.objects["daemonsets/kubeprof-s-agent"]
    assert (
        len(
            ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
        )
        == 1
    )
    assert ctx.light.answer("n1", ctx.writer_registry) == Answer()
    assert {c["type"]: c for c in st["conditions"]}["LightAgents"]["reason"] == "Starting"
    ctx.light.report(Heartbeat("n1", True, "", ("uid-session-1",)))
    mono[0] += 16
    body["status"] = reconcile(ctx, body)
    assert ctx.light.answer("n1", ctx.writer_registry) == first  # the same assignment again

    # Another restart, and n1's light agent stays silent past the stale time: n1 falls
    # back and is revoked, though this operator never handed it over itself.
    ctx.light = _light(mono, grace=15)
    ctx.light.report(Heartbeat("n1", True, "", ("uid-session-1",)))
    mono[0] += 21
    body["status"] = reconcile(ctx, body)
    assert ctx.light.answer("n1", ctx.writer_registry) == Answer((), ("uid-session-1",))


def test_no_assignment_once_the_session_stops_running(env) -> None:
    ctx, kube, _clock, _ = env
    ctx.light = _light([0.0])
    ctx.light.report(Heartbeat("n1", True))
    kube.pods = [_pod("p1", "n1", "uid-p1")]
    body = copy.deepcopy(BODY)
    body["status"] = reconcile(ctx, body)
    assert "daemonsets/kubeprof-s-agent" not in kube.objects  # n1 is the light agent's
    assert ctx.light.answer("n1", ctx.writer_registry).assignments
    ctx.writer_registry.get("ml", "s").phase = Phase.AGGREGATING
    assert ctx.light.answer("n1", ctx.writer_registry) == Answer()


def test_hand_over_reads_rates_from_the_spec() -> None:
    clock = [0.0]
    light = _light(clock)
    light.report(Heartbeat("a", True))
    spec = parse(
        {
            **BODY["spec"],
            "profilers": {"cpu": {"frequencyHz": 49}, "gpu": {"metricsIntervalMs": 250}},
        }
    )
    p = hand_over(light, BODY["metadata"], spec, ["a"], 99.0, [], ("cpu",))
    assert p.light_nodes == ["a"]
    h = light.handed("ml", "s")
    assert h is not None and (h.cpu_hz, h.nvml_interval_s, h.end_time) == (49, 0.25, 99.0)


# -- the light agent's switch -------------------------------------------------------------------
class FakeNodeAgent:
    """Stands in for NodeAgent in the switch's bookkeeping only (its run is a wait)."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop_event = stop
        self.batches = 0

    def run(self) -> int:
        self.stop_event.wait(30)
        return 0


def _switch() -> tuple[DeepSwitch, list[Assignment]]:
    started: list[Assignment] = []

    def start(_cfg: DeepConfig, a: Assignment, stop: threading.Event) -> FakeNodeAgent:
        started.append(a)
        return FakeNodeAgent(stop)

    return DeepSwitch(DeepConfig("a", "http://op", "t"), start=start), started  # type: ignore[arg-type]


def test_switch_is_idempotent_and_never_restarts_a_finished_session() -> None:
    sw, started = _switch()
    a = Assignment("ml", "s", "u1", "tok")
    sw.apply(Answer((a,)))
    sw.apply(Answer((a,)))  # the same assignment re-sent (operator restart): no second agent
    assert len(started) == 1 and sw.heartbeat().running == ("u1",)
    sw.apply(Answer())  # no answer content: what runs keeps running
    assert sw.running() == 1
    sw.workers["u1"].stop_event.set()  # the session ended by itself
    sw.workers["u1"].thread.join(5)
    assert sw.heartbeat().running == () and sw.done == {"u1"}
    sw.apply(Answer((a,)))
    assert len(started) == 1 and sw.running() == 0


def test_switch_stops_a_revoked_session_and_a_shallow_agent_takes_none() -> None:
    sw, _started = _switch()
    sw.apply(Answer((Assignment("ml", "s", "u1", "tok"),)))
    sw.apply(Answer((), ("u1",)))
    sw.workers["u1"].thread.join(5)
    assert sw.running() == 0
    shallow, started2 = _switch()
    shallow.problem = "tracefs is not mounted"
    shallow.apply(Answer((Assignment("ml", "s", "u2", "tok"),)))
    assert started2 == [] and shallow.heartbeat() == Heartbeat(
        "a", False, "tracefs is not mounted", ()
    )


# -- the heartbeat route, with the light agent's own client -------------------------------------
def test_heartbeat_route_checks_the_token_and_answers_the_agents_client(tmp_path) -> None:
    import asyncio
    from datetime import UTC, datetime

    from aiohttp.test_utils import TestClient, TestServer

    from kubeprof.agent.light.deep import post_heartbeat
    from kubeprof.operator.db import BatchWriter, ensure_session
    from kubeprof.operator.ingest import SERVER_OPTIONS, IngestApi
    from kubeprof.operator.light_deep import Handed, mount
    from kubeprof.operator.registry import Registry, SessionEntry
    from kubeprof.storage import Store

    store = Store.open(f"sqlite:///{tmp_path}/k.db")
    reg = Registry()
    sid = ensure_session(
        store.engine, "ml", "s", "u1", hz=99, started_at=datetime.now(UTC), meta={}
    )
    reg.put(SessionEntry("ml", "s", "u1", sid, "session-token", Phase.RUNNING, 42.0))
    light = _light([0.0])
    light.hand("ml", "s", Handed("u1", frozenset({"a"}), frozenset(), ("cpu",), 99, 1.0, 42.0))
    api = IngestApi(reg, BatchWriter(store.engine), writers=1, startup_grace_s=0)
    mount(api, light)

    async def go():
        async with TestClient(TestServer(api.app(), **SERVER_OPTIONS)) as client:
            url = "/v1/light/assignments"
            bad = await client.post(
                url, json=DEEP.to_json(), headers={"Authorization": "Bearer session-token"}
            )
            wrong = await client.post(
                url, json={"deep": True}, headers={"Authorization": "Bearer light-token"}
            )
            base = str(client.make_url("/"))
            cfg = DeepConfig("a", base, "light-token")
            loop = asyncio.get_running_loop()
            ans = await loop.run_in_executor(None, post_heartbeat, cfg, DEEP)
            refused = await loop.run_in_executor(
                None, post_heartbeat, DeepConfig("a", base, "nope"), DEEP
            )
            return bad.status, await bad.text(), wrong.status, await wrong.json(), ans, refused

    try:
        bad, bad_text, wrong, wrong_body, ans, refused = asyncio.run(go())
    finally:
        api.pool.shutdown()
        store.close()
    assert bad == 403 and "session-token" not in bad_text  # a session token is not the key
    assert wrong == 400 and wrong_body["message"].startswith("bad heartbeat: node")
    assert ans == Answer((Assignment("ml", "s", "u1", "session-token", ("cpu",), 99, 1.0, 42.0),))
    assert refused is None  # refused: the agent keeps what it runs
    assert light.seen()["a"].heartbeat == DEEP


@pytest.mark.parametrize(
    "extra,says",
    [
        ([], "--deep needs --operator-url"),
        (["--operator-url", "http://op:8080", "--token-file", "{empty}"], "is empty"),
        (["--operator-url", "http://op:8080", "--token-file", "{missing}"], "--token-file"),
    ],
)
def test_deep_without_its_settings_is_a_clear_error(tmp_path, capsys, monkeypatch, extra, says):
    from kubeprof.agent.light.main import main

    monkeypatch.delenv("KUBEPROF_INGEST_URL", raising=False)
    replay = tmp_path / "r.jsonl"
    replay.write_text('{"devices": []}\n')
    (tmp_path / "empty").write_text("\n")
    args = [a.format(empty=tmp_path / "empty", missing=tmp_path / "nope") for a in extra]
    rc = main(["--node-name", "a", "--replay", str(replay), "--deep", *args])
    assert rc == 2 and says in capsys.readouterr().err
