"""Sessions profiled by the always-on light agent where one can go deep on a node.

Light agents started with ``--deep`` send a heartbeat (`kubeprof.protocol.light`) to the
operator every few seconds, authenticated with the light agents' shared token. For each
session, `place` splits the target nodes: a node whose light agent was heard from lately
and can go deep is handed to that agent (no per-session DaemonSet pod there); every other
node gets the per-session DaemonSet, as on clusters without light agents. The reconciler
calls `hand_over` once per pass; the heartbeat's answer then names the sessions the node's
light agent runs (with the session's own ingest token, so its batches land exactly like a
DaemonSet agent's) and the ones it must stop because the DaemonSet took its node over.

Restart-safe like the rest of the operator: the table is memory only. For `grace_s` after
a start, while the light agents have not all called in yet, placement is left as it is
(existing DaemonSets keep their nodes; a new session waits), and light agents keep what
they run, because only an explicit revocation stops them. A node, once in a session's
DaemonSet, stays there for that session: two agents never profile one node together.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import web

from kubeprof.operator.config import DEFAULT_LIGHT_GRACE_S, DEFAULT_LIGHT_STALE_S
from kubeprof.operator.ingest import IngestApi, RateLimitedLog
from kubeprof.operator.phases import condition
from kubeprof.operator.registry import Registry, SessionEntry
from kubeprof.operator.spec import SessionSpec
from kubeprof.protocol import routes
from kubeprof.protocol.light import Answer, Assignment, Heartbeat, LightWireError
from kubeprof.protocol.phases import ACTIVE

log = logging.getLogger("kubeprof.operator.light")

MAX_HEARTBEAT_BYTES = 64 << 10  # a heartbeat is a few hundred bytes
NODES_NAMED = 3  # nodes named in a status message; the rest are counted


# Small frozen records; agent/light/readings.py's look alike but hold other data.
@dataclass(frozen=True, slots=True)
class Seen:
    """The last heartbeat of one node's light agent and when it came (monotonic s)."""

    heartbeat: Heartbeat
    at: float


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one session's agents run."""

    ds_nodes: list[str]  # the per-session DaemonSet's nodes
    light_nodes: list[str]  # nodes the light agent profiles deeply
    fallback: dict[str, str] = field(default_factory=dict)  # node -> why not its light agent
    hold: bool = False  # operator just started: placement left as it was
    running: int = 0  # light nodes whose agent reports the session running


def place(
    nodes: Iterable[str],
    seen: Mapping[str, Seen],
    now: float,
    stale_s: float,
    in_ds: Iterable[str] = (),
) -> Placement:
    """Split a session's target nodes between light agents and its DaemonSet (pure).

    A node goes to its light agent when that agent was heard from within `stale_s` and
    can go deep, unless the session's DaemonSet already runs there (`in_ds`: it stays).
    A node whose light agent exists but cannot take it is named in `fallback` with why.
    """
    keep = set(in_ds)
    ds, light, why = [], [], {}
    for node in sorted(set(nodes)):
        s = seen.get(node)
        if s is not None and now - s.at > stale_s:
            why[node] = f"light agent not heard from for {now - s.at:.0f}s"
        elif s is not None and not s.heartbeat.deep:
            why[node] = s.heartbeat.reason or "light agent cannot profile deeply"
        if s is None or node in why or node in keep:
            ds.append(node)
        else:
            light.append(node)
    return Placement(ds, light, why)


@dataclass(frozen=True, slots=True)
class Handed:
    """What one session handed to light agents (the heartbeat answers read it)."""

    uid: str
    nodes: frozenset[str]
    revoked: frozenset[str]  # nodes of the session's DaemonSet: no light agent runs it there
    collectors: tuple[str, ...]
    cpu_hz: int
    nvml_interval_s: float
    end_time: float


class LightAgents:
    """The light agents heard from, and what each session handed to them (thread-safe)."""

    def __init__(
        self,
        token: str,
        *,
        stale_s: float = DEFAULT_LIGHT_STALE_S,
        grace_s: float = DEFAULT_LIGHT_GRACE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not token:
            raise ValueError("the light agents' token is empty")
        self._token = token.encode()
        self.stale_s, self.grace_s, self.clock = stale_s, grace_s, clock
        self.started = clock()
        self._lock = threading.Lock()
        self._seen: dict[str, Seen] = {}
        self._handed: dict[tuple[str, str], Handed] = {}

    def loaded(self) -> bool:
        """Past the start-up grace: every live light agent has called in."""
        return self.clock() - self.started >= self.grace_s

    def report(self, hb: Heartbeat) -> None:
        with self._lock:
            self._seen[hb.node] = Seen(hb, self.clock())

    def seen(self) -> dict[str, Seen]:
        with self._lock:
            return dict(self._seen)

    def handed(self, namespace: str, name: str) -> Handed | None:
        with self._lock:
            return self._handed.get((namespace, name))

    def hand(self, namespace: str, name: str, handed: Handed) -> None:
        with self._lock:
            self._handed[(namespace, name)] = handed

    def release(self, namespace: str, name: str) -> None:
        with self._lock:
            self._handed.pop((namespace, name), None)

    def light_nodes(self, entry: SessionEntry) -> frozenset[str] | None:
        """Nodes whose light agent runs `entry`: where its session token is accepted
        under `--agent-auth serviceaccount` (light agents send the session's token).
        None while not known yet (just after an operator start, before the hand-over)."""
        h = self.handed(entry.namespace, entry.name)
        if h is not None and h.uid == entry.uid:
            return h.nodes
        return frozenset() if self.loaded() else None

    def token_ok(self, given: bytes) -> bool:
        return hmac.compare_digest(given, self._token)

    def answer(self, node: str, registry: Registry) -> Answer:
        """The sessions `node`'s light agent is to run and to stop."""
        out, revoked = [], []
        with self._lock:
            handed = list(self._handed.items())
        for (ns, name), h in handed:
            entry = registry.get(ns, name)
            if entry is None or entry.uid != h.uid:
                with self._lock:  # deleted or re-created: forget it (unless replaced since)
                    if self._handed.get((ns, name)) is h:
                        del self._handed[(ns, name)]
                continue
            if node in h.revoked:
                revoked.append(h.uid)
            elif node in h.nodes and entry.phase in ACTIVE and not entry.closed:
                out.append(
                    Assignment(
                        ns,
                        name,
                        h.uid,
                        entry.token,
                        h.collectors,
                        h.cpu_hz,
                        h.nvml_interval_s,
                        h.end_time,
                    )
                )
        return Answer(tuple(out), tuple(revoked))


def hand_over(
    light: LightAgents,
    meta: Mapping[str, Any],
    spec: SessionSpec,
    nodes: Iterable[str],
    end_time: float,
    in_ds: Iterable[str],
    collectors: tuple[str, ...],
) -> Placement:
    """One reconcile pass's placement of a Pending/Running session; records the hand-over.

    Returns the nodes its DaemonSet keeps; the light agents learn theirs at their next
    heartbeat. While the table is still loading, placement is left as it was.
    """
    ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
    in_ds = sorted(set(in_ds))
    if not light.loaded():
        return Placement(in_ds, [], hold=True)
    seen = light.seen()
    p = place(nodes, seen, light.clock(), light.stale_s, in_ds)
    # Revoked wherever the DaemonSet runs: stateless, so it holds after an operator restart
    # too, and a light agent that comes back on such a node stops instead of doubling up.
    light.hand(
        ns,
        name,
        Handed(
            uid,
            frozenset(p.light_nodes),
            frozenset(p.ds_nodes),
            collectors,
            spec.profilers.cpu.frequency_hz,
            spec.profilers.gpu.metrics_interval_ms / 1000,
            end_time,
        ),
    )
    running = sum(1 for n in p.light_nodes if uid in seen[n].heartbeat.running)
    return replace(p, running=running)


def _named(nodes: list[str]) -> str:
    shown = ", ".join(nodes[:NODES_NAMED])
    return shown + (f" and {len(nodes) - NODES_NAMED} more" if len(nodes) > NODES_NAMED else "")


def status_fields(p: Placement, now_iso: str, previous: list[dict]) -> dict[str, Any]:
    """`.status.lightAgents` (counts only: the status must not grow with the cluster) and
    a LightAgents condition saying which nodes fell back to the per-session DaemonSet."""
    fell = sorted(p.fallback)
    if p.hold:
        msg = "operator starting: waiting for the light agents to call in"
    elif fell:
        reasons = sorted({p.fallback[n] for n in fell})
        msg = (
            f"{len(p.light_nodes)} node(s) profiled by the light agent; per-session agent "
            f"on {_named(fell)} instead: {reasons[0]}"
            + (f" (and {len(reasons) - 1} other reason(s))" if len(reasons) > 1 else "")
        )
    else:
        msg = f"{len(p.light_nodes)} node(s) profiled by the light agent"
    reason = "Starting" if p.hold else ("FellBack" if fell else "HandedOver")
    return {
        "lightAgents": {
            "nodes": len(p.light_nodes),
            "running": p.running,
            "fallbackNodes": len(fell),
        },
        "lightCondition": condition(
            "LightAgents", bool(p.light_nodes) and not fell, reason, msg[:1000], now_iso, previous
        ),
    }


# -- the heartbeat route ---------------------------------------------------------------------
def mount(server: IngestApi, light: LightAgents) -> None:
    """Make `server.app()` serve `routes.LIGHT_ASSIGNMENTS` next to the ingest routes."""
    build = server.app
    auth_log = RateLimitedLog()
    server.session_token_nodes = light.light_nodes

    async def post_heartbeat(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        given = auth.removeprefix("Bearer ").strip().encode("utf-8", "surrogateescape")
        if not auth.startswith("Bearer ") or not light.token_ok(given):
            auth_log.warning("refused a light agent heartbeat: bad token (from %s)", request.remote)
            return web.json_response({"message": "light agent token is not valid"}, status=403)
        if (request.content_length or 0) > MAX_HEARTBEAT_BYTES:
            return web.json_response({"message": "heartbeat too large"}, status=413)
        try:
            hb = Heartbeat.from_json(json.loads(await request.read()))
        except (ValueError, LightWireError) as exc:
            return web.json_response({"message": f"bad heartbeat: {exc}"}, status=400)
        light.report(hb)
        return web.json_response(light.answer(hb.node, server.registry).to_json())

    def app() -> web.Application:
        application = build()
        application.router.add_post(routes.LIGHT_ASSIGNMENTS, post_heartbeat)
        return application

    server.app = app  # type: ignore[method-assign]
