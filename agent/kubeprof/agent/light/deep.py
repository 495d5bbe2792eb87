"""Going deep: the light agent runs the ordinary node agent for sessions handed to it.

With ``--deep`` the light agent sends a heartbeat to the operator every few seconds
(`kubeprof.protocol.light`): its node, whether it can profile deeply (the BPF preflight
passed at start) and the sessions it runs. The answer names the sessions to profile on
this node, each with its ingest token (none when the operator runs `--agent-auth
serviceaccount`: then this pod's own projected token, the one its heartbeats carry, is its
credential for batches too). For each one a worker thread runs
`kubeprof.agent.cluster.agent.NodeAgent` (the per-session DaemonSet's agent: the same
collectors, driver, spool and shipper), which asks the ingest for its targets, ships
with that token and ends by itself when the session leaves Running, draining
its spool; the light agent is then back to light only. A session is stopped early only
when the operator revokes it (its DaemonSet took this node over). An answer that does not
come (operator restarting) changes nothing: what runs keeps running.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kubeprof.agent.cluster.agent import NodeAgent
from kubeprof.agent.cluster.client import OperatorClient, Outcome
from kubeprof.protocol import routes
from kubeprof.protocol.light import Answer, Assignment, Heartbeat, LightWireError
from kubeprof.protocol.settings import AgentSettings

log = logging.getLogger("kubeprof.agent.light")


@dataclass(frozen=True)
class DeepConfig:
    """What the workers need beyond each assignment (from the light agent's flags)."""

    node: str
    operator_url: str  # the operator's ingest API: heartbeats and the sessions' batches
    # The pod's projected ServiceAccount token (read at each request: the kubelet rotates
    # it), or the light agents' shared token (heartbeats only).
    token: str | Callable[[], str] = field(repr=False)
    heartbeat_s: float = 5.0
    # The node-side settings of the sessions' node agents (spool, /proc, intervals).
    agent: AgentSettings = field(default_factory=AgentSettings)

    def agent_settings(self) -> AgentSettings:
        """The settings every session's node agent here shares (the assignment adds the
        session's own: `Assignment.settings`)."""
        return dataclasses.replace(self.agent, node_name=self.node, ingest_url=self.operator_url)


def start_node_agent(cfg: DeepConfig, a: Assignment, stop: threading.Event) -> NodeAgent:
    """The node agent of one session, built as `kubeprof agent` builds it for a DaemonSet
    (setting `stop` ends it)."""
    from kubeprof.agent.cluster.assemble import build_node_agent

    return build_node_agent(a.settings(cfg.agent_settings()), a.token or cfg.token, stop_event=stop)


@dataclass
class Worker:
    """One session profiled deeply on this node: a thread that builds its node agent (bcc
    compiles for seconds: never on the heartbeat's thread) and runs it."""

    assignment: Assignment
    thread: threading.Thread = field(default_factory=threading.Thread)  # set before start
    stop_event: threading.Event = field(default_factory=threading.Event)
    agent: NodeAgent | None = None  # once built


@dataclass
class DeepSwitch:
    """Starts and stops the node agents the operator hands this light agent."""

    cfg: DeepConfig
    problem: str | None = None  # why this agent cannot go deep (None: it can)
    start: Callable[[DeepConfig, Assignment, threading.Event], NodeAgent] = start_node_agent
    workers: dict[str, Worker] = field(default_factory=dict)  # session UID -> worker
    done: set[str] = field(default_factory=set)  # finished here: never started again
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def heartbeat(self) -> Heartbeat:
        """What to tell the operator now (finished workers are retired first)."""
        with self._lock:
            for uid, w in list(self.workers.items()):
                if not w.thread.is_alive():
                    a = w.assignment
                    log.info(
                        "deep: session %s/%s finished on this node (%d batches); back "
                        "to light only for it",
                        a.namespace,
                        a.session,
                        w.agent.batches if w.agent is not None else 0,
                    )
                    del self.workers[uid]
                    self.done.add(uid)
            running = tuple(sorted(self.workers))
        return Heartbeat(self.cfg.node, self.problem is None, self.problem or "", running)

    def apply(self, answer: Answer) -> None:
        """Start the new assignments, stop the revoked sessions (idempotent)."""
        for uid in answer.revoked:
            with self._lock:
                w = self.workers.get(uid)
            if w is not None and not w.stop_event.is_set():
                log.info(
                    "deep: session %s/%s revoked (its DaemonSet took this node); stopping",
                    w.assignment.namespace,
                    w.assignment.session,
                )
                w.stop_event.set()
        if self.problem is not None:  # the operator gives this node to the DaemonSet
            return
        for a in answer.assignments:
            with self._lock:
                if a.uid in self.workers or a.uid in self.done or a.uid in answer.revoked:
                    continue
                w = Worker(a)
                w.thread = threading.Thread(
                    target=self._work, args=(w,), name=f"deep-{a.session}", daemon=True
                )
                self.workers[a.uid] = w
            log.info(
                "deep: profiling session %s/%s on node %s", a.namespace, a.session, self.cfg.node
            )
            w.thread.start()

    def _work(self, w: Worker) -> None:
        """The worker thread: build the session's node agent, run it until it ends."""
        a = w.assignment
        try:
            w.agent = self.start(self.cfg, a, w.stop_event)
        except Exception as exc:  # noqa: BLE001 - say so; the operator falls back
            self.problem = f"could not start the deep agent: {type(exc).__name__}: {exc}"
            log.warning("deep: %s/%s: %s", a.namespace, a.session, self.problem)
            return
        w.agent.run()

    def running(self) -> int:
        with self._lock:
            return sum(1 for w in self.workers.values() if w.thread.is_alive())

    def stop_all(self, timeout_s: float) -> None:
        """Stop every worker and wait for their last batches to be spooled and sent."""
        with self._lock:
            workers = list(self.workers.values())
        for w in workers:
            w.stop_event.set()
        for w in workers:
            w.thread.join(timeout_s)

    def run(self, stop: threading.Event) -> None:
        """Heartbeat loop until `stop` is set."""
        while not stop.is_set():
            answer = post_heartbeat(self.cfg, self.heartbeat())
            if answer is not None:
                self.apply(answer)
            stop.wait(self.cfg.heartbeat_s)


def post_heartbeat(cfg: DeepConfig, hb: Heartbeat, timeout_s: float = 10.0) -> Answer | None:
    """The operator's answer, or None (logged) when there is none to act on."""
    client = OperatorClient(cfg.operator_url, cfg.token, timeout_s=timeout_s)
    body = json.dumps(hb.to_json()).encode()
    got = client.call("POST", routes.LIGHT_ASSIGNMENTS, body, {"Content-Type": "application/json"})
    if got.status == 0:
        log.info("deep: no answer from the operator (%s); keeping what runs", got.detail)
    elif got.outcome is not Outcome.STORED:
        log.warning("deep: heartbeat refused (HTTP %d): %s", got.status, got.detail[:200])
    else:
        try:
            return Answer.from_json(got.data)
        except LightWireError as exc:
            log.info("deep: no answer from the operator (%s); keeping what runs", exc)
    return None


class DeepCollector(Collector):
    """kubeprof_light_deep_* on the light agent's /metrics."""

    def __init__(self, switch: DeepSwitch) -> None:
        self.switch = switch

    def collect(self) -> Iterator[GaugeMetricFamily]:
        capable = GaugeMetricFamily(
            "kubeprof_light_deep_capable",
            "1 when this light agent can profile sessions deeply (started with --deep, BPF "
            "preflight passed)",
            labels=["node"],
        )
        capable.add_metric([self.switch.cfg.node], 0 if self.switch.problem else 1)
        sessions = GaugeMetricFamily(
            "kubeprof_light_deep_sessions",
            "ProfilingSessions this light agent profiles deeply on its node now",
            labels=["node"],
        )
        sessions.add_metric([self.switch.cfg.node], self.switch.running())
        yield from (capable, sessions)
