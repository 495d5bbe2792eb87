"""The ingest API agents push to, plus /metrics and /healthz (aiohttp, in kopf's loop).

  POST /v1/sessions/{namespace}/{name}/batches   gzip JSON batch -> stored once
  GET  /v1/sessions/{namespace}/{name}/targets?node=N   target pods on N, phase, end time

Agents authenticate with their pod's projected ServiceAccount token, checked with
TokenReview and bound to the pod and its node (`agent_identity`, `--agent-auth
serviceaccount`): such an agent may send only for its own node. A light agent pod
(`light_deep`) sends its own token the same way, for its node while the session is handed
to it there. Where TokenReview is not available (`--agent-auth session-token`) the
session's shared bearer token (the Secret the operator created for it) stands in, for any
of the session's nodes. The session is looked
up first, in memory: an unknown session and a wrong token get the same 403, so the API
tells nobody which sessions exist. Answers tell agents
what to do: 2xx stored (or already stored); 503/429 retry later (database down, operator
starting, too busy); 400/413/415/422 this batch is bad, set it aside (the message names the
field); 401/403 credentials; 409/410 the session no longer takes data.

Every body is bounded before it can cost memory (`kubeprof.protocol.limits`): its wire
size, its size after gzip whatever the headers say, its JSON value count, rows, string
lengths. Decoding and writing run on a `FairPool` that takes sessions in turn. A batch is
counted in flight before its body is read, so aggregation waits for it, and one still
unfinished when the session is sealed is refused (409), never stored after the aggregates.
Tokens are compared in constant time and never logged.

Slow or idle clients cannot hold that capacity (`slow_clients`): headers and body must
arrive within time limits and at a minimum rate (else 408), at most `per_client` requests
per address and `per_session` per session are in flight before the global `max_pending`
applies (else 429), and an answer given before the body was read closes the connection.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import wraps
from typing import Any

from aiohttp import web
from sqlalchemy.exc import DataError, IntegrityError, SQLAlchemyError

from kubeprof.model import Batch
from kubeprof.operator import agent_identity, build, db, metrics, slow_clients, usage
from kubeprof.operator.agent_identity import AgentIdentity, Denied, TokenReviews
from kubeprof.operator.config import DEFAULT_DRAIN_S, DEFAULT_INGEST_WRITERS
from kubeprof.operator.db import BatchWriter, Stored
from kubeprof.operator.fairpool import FairPool
from kubeprof.operator.node_pods import NodePods
from kubeprof.operator.registry import Registry, SessionClosed, SessionEntry
from kubeprof.protocol import codec, routes
from kubeprof.protocol.limits import IngestLimits
from kubeprof.protocol.phases import ACCEPTS_DATA, Phase

log = logging.getLogger("kubeprof.operator.ingest")

# aiohttp server options the ingest needs: bodies arrive as sent, so the one bounded
# gunzip in the codec applies whatever Content-Encoding claims.
SERVER_OPTIONS: dict[str, Any] = {"auto_decompress": False}
_ENCODINGS = ("", "identity", "gzip")


def _json(status: int, message: str = "", **extra: object) -> web.Response:
    return web.json_response({"message": message, **extra}, status=status)


class _Refused(Exception):
    """A batch refused for what it claims (the answer's status and message)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason = status, reason


class RateLimitedLog:
    """At most one line per `every_s` seconds; the next line says how many were skipped,
    so refused credentials cannot flood the log."""

    def __init__(self, every_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.every_s, self.clock = every_s, clock
        self._next = 0.0
        self.suppressed = 0

    def warning(self, msg: str, *args: object, exc_info: bool = False) -> None:
        now = self.clock()
        if now < self._next:
            self.suppressed += 1
            return
        if self.suppressed:
            msg += f" ({self.suppressed} similar line(s) suppressed)"
            self.suppressed = 0
        self._next = now + self.every_s
        log.warning(msg, *args, exc_info=exc_info)


@dataclass(frozen=True, slots=True)
class Sender:
    """Who sent a request: an agent pod (reviewed token) or a holder of the session token."""

    identity: AgentIdentity | None  # None: the session's shared token
    nodes: frozenset[str] | None  # the only nodes it may send for; None: any of the session's

    def describe(self) -> str:
        if self.identity is not None:
            return self.identity.describe()
        return "the session token's holder"


_SHARED = Sender(None, None)


@dataclass
class Origins:
    """Nodes and pods a session has targeted so far (targets come and go; a late batch
    from a node whose pod just finished is still the session's)."""

    nodes: set[str] = field(default_factory=set)
    pod_nodes: dict[str, str] = field(default_factory=dict)  # pod uid -> its node
    loaded_at: float = -1e9  # monotonic time of the last read from the database

    def add(self, entry: SessionEntry) -> None:
        for t in list(entry.targets):
            self.nodes.add(t.node)
            self.pod_nodes[t.uid] = t.node


_SessionHandler = Callable[
    ["IngestApi", web.Request, SessionEntry, Sender], Awaitable[web.Response]
]


def _authorized(
    handler: _SessionHandler,
) -> Callable[[IngestApi, web.Request], Awaitable[web.Response]]:
    """The one authorization prologue of the session routes: a refusal is answered and the
    connection closed (the body is never read); else the handler gets the session and the
    sender."""

    @wraps(handler)
    async def route(api: IngestApi, request: web.Request) -> web.Response:
        authorized = await api._authorize(request)
        if isinstance(authorized, web.Response):
            return await slow_clients.answer_and_close(request, authorized)
        return await handler(api, request, *authorized)

    return route


class IngestApi:
    """Request handlers bound to the registry and a batch writer."""

    def __init__(
        self,
        registry: Registry,
        writer: BatchWriter,
        *,
        writers: int = DEFAULT_INGEST_WRITERS,
        limits: IngestLimits | None = None,
        max_pending: int = 16,
        session_pending: int = 8,
        startup_grace_s: float = 60.0,
        drain_s: float = DEFAULT_DRAIN_S,
        per_session: int | None = None,
        per_client: int = 8,
        timeouts: slow_clients.ReadTimeouts | None = None,
        metrics_token: str = "",
        reviews: TokenReviews | None = None,
        agent_service_account: str = "default",
        node_pods: NodePods | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry, self.writer = registry, writer
        self.limits = limits or IngestLimits()
        self.limits.check()
        # One session may write on `writers` threads at once, as many as before there was
        # more than one; one more thread is kept for sessions with nothing running and one
        # batch waiting, so their batches start at once even while sessions with a backlog
        # keep every other writer busy (however many such sessions there are).
        self.pool = FairPool(writers + 1, per_key=writers, reserve=1, name="ingest")
        self.max_pending, self.session_pending = max_pending, session_pending
        # Checked before the global limit, so neither one session (however many agents
        # send for it) nor one address (however many sessions it holds tokens of) can take
        # every slot: three sessions at their limit leave a quarter for everyone else.
        self.per_session = per_session or max(1, max_pending // 4)
        self.per_client = per_client
        self.timeouts = timeouts or slow_clients.ReadTimeouts()
        self._clients: dict[str, int] = {}  # requests in flight per client address
        # /metrics names sessions, namespaces and pods: with a token, only its holder reads it.
        self.metrics_token = metrics_token.encode()
        # With reviews (--agent-auth serviceaccount) agents send their pod's ServiceAccount
        # token and the session token is refused. Light agent pods (light_deep.mount sets
        # these) live in `light_namespace` and may send for the nodes `light_nodes` gives
        # (None: not known yet, just after a start). Reviews run on their own few threads.
        self.reviews, self.agent_service_account = reviews, agent_service_account
        # A process may name a pod that is no target (GPU sharing) only if the API lists it
        # on the batch's node (None: not checked, as in benchmarks without an API server).
        self.node_pods = node_pods
        self.light_namespace = ""
        self.light_nodes: Callable[[SessionEntry, AgentIdentity], Collection[str] | None] = (
            lambda _e, _w: ()
        )
        self._review_pool = ThreadPoolExecutor(4, thread_name_prefix="tokenreview")
        self._reviewing = 0  # reviews asked for and not answered yet (bounded)
        self.max_reviewing = 64
        self.clock = clock
        self.loading_until = clock() + startup_grace_s
        self.pending = 0  # requests past authentication, not answered yet
        self.auth_log = RateLimitedLog()
        self.error_log = RateLimitedLog()
        self._origins: dict[tuple[str, str, str], Origins] = {}
        # Each session's stored rows and nodes' time extents bound its next batches (a
        # writer with no database behind it has nothing stored to start from).
        engine = getattr(writer, "engine", None)
        self.usage = usage.SessionUsage(
            self.limits,
            drain_s,
            (lambda sid: db.session_usage(engine, sid))
            if engine is not None
            else (lambda _sid: ((0, 0, 0), {})),
        )

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.limits.max_body_bytes)
        app.router.add_post(routes.BATCHES_ROUTE, self.post_batch)
        app.router.add_get(routes.TARGETS_ROUTE, self.get_targets)
        app.router.add_get(routes.METRICS, self.get_metrics)
        app.router.add_get(routes.HEALTHZ, self.get_healthz)
        return app

    # -- authentication -----------------------------------------------------------------
    async def _authorize(self, request: web.Request) -> tuple[SessionEntry, Sender] | web.Response:
        """The session and who sends for it; an answer (401/403/503) when refused."""
        ns, name = request.match_info["namespace"], request.match_info["name"]
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            metrics.INGEST_REJECTIONS.labels(reason="no_token").inc()
            return _json(401, "missing bearer token (Authorization: Bearer <agent token>)")
        token = auth.removeprefix("Bearer ").strip()
        # Header bytes that are not UTF-8 arrive as surrogates: compare them as sent.
        given = token.encode("utf-8", "surrogateescape")
        entry = self.registry.get(ns, name)
        if entry is None and self.clock() < self.loading_until:
            # The operator just started and may not have loaded every session yet: retry.
            # Said for any unloaded name, so it tells nothing about which sessions exist.
            metrics.INGEST_REJECTIONS.labels(reason="not_loaded").inc()
            return _json(503, "operator starting, sessions not loaded yet; retry")
        expected = entry.token.encode() if entry is not None else b"\0" * 32
        if hmac.compare_digest(given, expected) and entry is not None:
            return self._shared_token(request, entry)
        if entry is not None and self.reviews is not None and agent_identity.looks_like_jwt(token):
            return await self._agent_token(request, entry, token)
        metrics.INGEST_REJECTIONS.labels(reason="forbidden").inc()
        self.auth_log.warning(
            "refused a request for %r/%r: no such session or the token does not match (from %s)",
            ns[:63],
            name[:253],
            request.remote,
        )
        return _json(
            403, f"token is not valid for session {ns}/{name} (or there is no such session)"
        )

    def _shared_token(
        self, request: web.Request, entry: SessionEntry
    ) -> tuple[SessionEntry, Sender] | web.Response:
        """The session token: any node under --agent-auth session-token, refused under
        serviceaccount (light agents too send their pod's own token there)."""
        if self.reviews is None:
            return entry, _SHARED
        metrics.INGEST_REJECTIONS.labels(reason="forbidden").inc()
        self.auth_log.warning(
            "refused the session token of %s/%s (from %s): --agent-auth serviceaccount",
            entry.namespace,
            entry.name,
            request.remote,
        )
        return _json(
            401,
            "the session token is not accepted here (operator runs --agent-auth "
            "serviceaccount): send the agent pod's projected ServiceAccount token "
            f"(audience {agent_identity.AUDIENCE})",
        )

    async def review(
        self, request: web.Request, token: str, namespaces: tuple[str, ...], what: str
    ) -> AgentIdentity | web.Response:
        """The identity of a ServiceAccount token from a pod of one of `namespaces`
        (reviewed, cached), or the answer refusing it (401/403 naming why, 503 retry)."""
        assert self.reviews is not None
        try:
            who = self.reviews.cached(token, namespaces)
            if who is None:
                if self._reviewing >= self.max_reviewing:
                    metrics.INGEST_REJECTIONS.labels(reason="busy").inc()
                    return _json(503, "too many tokens being checked; retry")
                self._reviewing += 1
                try:
                    loop = asyncio.get_running_loop()
                    who = await loop.run_in_executor(
                        self._review_pool, self.reviews.identity, token, namespaces
                    )
                finally:
                    self._reviewing -= 1
        except Denied as exc:
            return self.denied(request, exc, what)
        except Exception as exc:  # noqa: BLE001 - API server down or slow: the agent retries
            metrics.INGEST_REJECTIONS.labels(reason="review_failed").inc()
            self.error_log.warning("TokenReview failed: %s: %s", type(exc).__name__, exc)
            return _json(503, "cannot check the agent token with the API server now; retry")
        return who

    def denied(self, request: web.Request, exc: Denied, what: str) -> web.Response:
        """The answer to refused credentials (counted, logged rate-limited, never the token)."""
        metrics.INGEST_REJECTIONS.labels(reason="forbidden").inc()
        self.auth_log.warning(
            "refused an agent token for %s (from %s): %s", what, request.remote, exc
        )
        return _json(exc.status, f"{exc} ({what})")

    async def _agent_token(
        self, request: web.Request, entry: SessionEntry, token: str
    ) -> tuple[SessionEntry, Sender] | web.Response:
        """A ServiceAccount token: reviewed (cached), then bound to an agent pod of this
        session or to a light agent pod the session is handed to; the sender may speak
        only for the node its pod runs on."""
        what = f"session {entry.namespace}/{entry.name}"
        light_ns = (self.light_namespace,) if self.light_namespace else ()
        who = await self.review(request, token, (entry.namespace, *light_ns), what)
        if isinstance(who, web.Response):
            return who
        try:
            if light_ns and agent_identity.is_light(who, self.light_namespace):
                return self._light_sender(entry, who)
            agent_identity.check_agent(
                who,
                entry.namespace,
                build.label_value(entry.name),
                lambda shard: build.daemonset_name({"metadata": {"name": entry.name}}, shard),
                self.agent_service_account,
            )
        except Denied as exc:
            return self.denied(request, exc, what)
        return entry, Sender(who, frozenset({who.node}))

    def _light_sender(
        self, entry: SessionEntry, who: AgentIdentity
    ) -> tuple[SessionEntry, Sender] | web.Response:
        """A light agent pod (checked by `light_nodes`, which raises Denied) sends for its
        node only while the session is handed to the light agent there."""
        nodes = self.light_nodes(entry, who)
        if nodes is None:  # the hand-over is not known yet (operator starting)
            metrics.INGEST_REJECTIONS.labels(reason="not_loaded").inc()
            return _json(503, "operator starting, light agents' nodes not known yet; retry")
        if who.node not in nodes:
            raise Denied(
                403,
                "not_agent",
                f"light agent {who.describe()} does not run this session on its node "
                "(not handed to it, or its DaemonSet took the node over)",
            )
        return entry, Sender(who, frozenset({who.node}))

    # -- batches ------------------------------------------------------------------------
    def _precheck(self, request: web.Request, entry: SessionEntry) -> web.Response | None:
        if entry.phase not in ACCEPTS_DATA:
            metrics.INGEST_REJECTIONS.labels(reason="session_over").inc()
            return _json(
                410,
                f"session is {entry.phase.value}; no more data accepted",
                phase=entry.phase.value,
            )
        enc = request.headers.get("Content-Encoding", "").strip().lower()
        if enc not in _ENCODINGS:
            metrics.INGEST_REJECTIONS.labels(reason="bad_body").inc()
            return _json(
                415, f"Content-Encoding {enc[:40]!r} is not supported; send gzip or plain JSON"
            )
        size = request.content_length
        if size is not None and size > self.limits.max_body_bytes:
            metrics.INGEST_REJECTIONS.labels(reason="too_large").inc()
            return _json(
                413,
                f"body of {size} bytes; at most {self.limits.max_body_bytes} "
                "(send smaller batches, or raise --ingest-max-body-bytes)",
            )
        if self._clients.get(request.remote or "", 0) >= self.per_client:
            metrics.INGEST_REJECTIONS.labels(reason="busy").inc()
            return _json(
                429, f"more than {self.per_client} requests from this address in flight; retry"
            )
        if entry.inflight >= self.per_session:
            metrics.INGEST_REJECTIONS.labels(reason="busy").inc()
            return _json(
                429, f"more than {self.per_session} batches of this session in flight; retry"
            )
        if self.pending >= self.max_pending:
            metrics.INGEST_REJECTIONS.labels(reason="busy").inc()
            return _json(503, "ingest busy; retry")
        if self.pool.queued((entry.namespace, entry.name)) >= self.session_pending:
            metrics.INGEST_REJECTIONS.labels(reason="busy").inc()
            return _json(
                429, f"more than {self.session_pending} batches of this session in flight; retry"
            )
        return None

    @_authorized
    async def post_batch(
        self, request: web.Request, entry: SessionEntry, sender: Sender
    ) -> web.Response:
        refused = self._precheck(request, entry)
        if refused is not None:
            return refused
        # Counted in before the body is read: aggregation waits for this batch.
        if not entry.enter():
            metrics.INGEST_REJECTIONS.labels(reason="closed").inc()
            return _json(
                409,
                f"session {entry.namespace}/{entry.name} is being aggregated; "
                "no more data accepted",
                phase=Phase.AGGREGATING.value,
            )
        self.pending += 1
        client = request.remote or ""
        self._clients[client] = self._clients.get(client, 0) + 1
        try:
            return await self._receive(request, entry, sender)
        finally:
            self.pending -= 1
            n = self._clients.pop(client) - 1
            if n:
                self._clients[client] = n
            entry.leave()

    async def _receive(
        self, request: web.Request, entry: SessionEntry, sender: Sender
    ) -> web.Response:
        try:
            body = await slow_clients.read_body(
                request.content, self.limits.max_body_bytes, self.timeouts
            )
        except slow_clients.TooSlow as exc:
            metrics.INGEST_REJECTIONS.labels(reason="slow").inc()
            return await slow_clients.answer_and_close(
                request, _json(408, f"{exc}; send the body without pauses, or retry")
            )
        except (web.HTTPRequestEntityTooLarge, slow_clients.TooLarge):
            metrics.INGEST_REJECTIONS.labels(reason="too_large").inc()
            return _json(
                413,
                f"body larger than {self.limits.max_body_bytes} bytes (send "
                "smaller batches, or raise --ingest-max-body-bytes)",
            )
        except Exception as exc:  # noqa: BLE001 - a broken upload: the client's problem
            metrics.INGEST_REJECTIONS.labels(reason="bad_body").inc()
            return _json(400, f"unreadable body: {type(exc).__name__}")
        metrics.INGEST_PENDING.inc()  # waiting for (or in) a decode+write thread
        try:
            # The pool's future is not kept in a local: a refusal's traceback holds this
            # frame, and would keep the future, its exception and the body in a cycle.
            stored = await asyncio.wrap_future(
                self.pool.submit(
                    (entry.namespace, entry.name),
                    lambda: self._decode_and_store(entry, body, sender),
                )
            )
        except codec.CodecError as exc:
            metrics.INGEST_REJECTIONS.labels(
                reason="too_large" if exc.too_large else "bad_body"
            ).inc()
            return _json(exc.status, str(exc))
        except (_Refused, usage.Refused) as exc:
            metrics.INGEST_REJECTIONS.labels(reason=exc.reason).inc()
            return _json(exc.status, str(exc))
        except SessionClosed as exc:
            metrics.INGEST_REJECTIONS.labels(reason="closed").inc()
            return _json(409, f"{exc}; no more data accepted", phase=Phase.AGGREGATING.value)
        except (DataError, IntegrityError) as exc:
            # The database refused the values themselves: retrying cannot help.
            metrics.INGEST_REJECTIONS.labels(reason="bad_body").inc()
            return _json(422, f"the database refused a value of this batch: {_first_line(exc)}")
        except SQLAlchemyError as exc:
            metrics.INGEST_REJECTIONS.labels(reason="database").inc()
            self.error_log.warning(
                "database write failed for %s/%s: %s: %s",
                entry.namespace,
                entry.name,
                type(exc).__name__,
                _first_line(exc),
            )
            return _json(503, "database unavailable; retry later")
        except Exception as exc:  # noqa: BLE001 - a bug must not wedge the agent on 5xx
            metrics.INGEST_REJECTIONS.labels(reason="error").inc()
            # Throttled: a client repeating such a body must not fill the log.
            self.error_log.warning(
                "could not process a batch of %s/%s: %s",
                entry.namespace,
                entry.name,
                type(exc).__name__,
                exc_info=True,
            )
            return _json(
                422, f"batch could not be processed ({type(exc).__name__}); it was not stored"
            )
        finally:
            metrics.INGEST_PENDING.dec()
        metrics.INGEST_BATCHES.labels(result="duplicate" if stored.duplicate else "stored").inc()
        if not stored.duplicate:
            metrics.INGEST_ROWS.inc(stored.rows)
        return _json(
            200,
            "duplicate" if stored.duplicate else "stored",
            rows=stored.rows,
            duplicate=stored.duplicate,
            phase=entry.phase.value,
        )

    def _decode_and_store(self, entry: SessionEntry, body: bytes, sender: Sender) -> Stored:
        """On a pool thread: decode under the limits, check the claims (origin, the
        session's time window and quotas), store once."""
        batch_id, node, batch = codec.decode(body, limits=self.limits)
        batch = self._check_origin(entry, node, batch, sender)
        charge = self.usage.admit(entry, node, batch)
        try:
            stored = self.writer.store(
                entry.db_id,
                batch_id,
                node,
                batch,
                committing=entry.committing,
                interned=self.usage.interning(entry, charge),
            )
        except BaseException:
            self.usage.release(entry, charge)
            raise
        if stored.duplicate:
            self.usage.release(entry, charge)
        return stored

    def _origins_of(self, entry: SessionEntry) -> Origins:
        key = (entry.namespace, entry.name, entry.uid)
        o = self._origins.get(key)
        if o is None:
            o = self._origins[key] = Origins()
        o.add(entry)
        return o

    def _check_origin(
        self, entry: SessionEntry, node: str, batch: Batch, sender: Sender = _SHARED
    ) -> Batch:
        """The node (and each target pod a process names) must be among the session's
        targets, and the sender's own node when its token binds it to one (403 otherwise).

        A process naming a pod that is no target and that the API does not list on this
        node keeps its record but loses the claim (`pod_uid` emptied, counted in
        `kubeprof_ingest_pod_claims_dropped_total`): refusing the whole batch would lose the
        session's own samples for a neighbour the operator cannot see (another namespace
        under `watchNamespaces`, a pod gone between two listings). Returns the batch to
        store."""
        if sender.nodes is not None and node not in sender.nodes:
            raise _Refused(
                403,
                "identity",
                f"node: {node[:253]!r} is not the node of the sender ({sender.describe()}); "
                "an agent sends only for its own node",
            )
        o = self._origins_of(entry)
        if node not in o.nodes and self.clock() - o.loaded_at > 5:
            # Maybe targeted before an operator restart: what the database remembers.
            nodes, pods = db.known_origins(self.writer.engine, entry.db_id)
            o.nodes |= nodes
            for uid in pods:
                o.pod_nodes.setdefault(uid, "")
            o.loaded_at = self.clock()
        if node not in o.nodes:
            raise _Refused(
                422,
                "origin",
                f"node: {node[:253]!r} runs no target pod of "
                f"session {entry.namespace}/{entry.name}",
            )
        unconfirmed: set[int] = set()
        for i, p in enumerate(batch.processes):
            where = o.pod_nodes.get(p.pod_uid)
            if where and where != node:
                raise _Refused(
                    422 if sender.identity is None else 403,
                    "origin",
                    f"processes[{i}].pod_uid: pod {p.pod_uid} runs on node {where}, not on {node}",
                )
            if where is None and p.pod_uid and self.node_pods is not None:
                if self._on_node(p.pod_uid, node, i):
                    o.pod_nodes[p.pod_uid] = node
                else:
                    unconfirmed.add(i)
        o.nodes.add(node)
        if not unconfirmed:
            return batch
        metrics.POD_CLAIMS_DROPPED.inc(len(unconfirmed))
        kept = tuple(
            replace(p, pod_uid="") if i in unconfirmed else p for i, p in enumerate(batch.processes)
        )
        return replace(batch, processes=kept)

    def _on_node(self, uid: str, node: str, i: int) -> bool:
        """Whether the API lists pod `uid` on `node`; 503 (retry) when it cannot say now."""
        assert self.node_pods is not None
        try:
            on = self.node_pods.on_node(uid, node)
        except Exception as exc:  # API server down: retry, lose nothing
            self.error_log.warning("listing the pods of a node failed: %s", type(exc).__name__)
            raise _Refused(
                503, "busy", "cannot check the batch's pods with the API server now; retry"
            ) from exc
        if on is None:
            raise _Refused(
                503,
                "busy",
                f"processes[{i}].pod_uid: pod {uid[:64]} not listed on node {node[:253]} "
                "yet; retry",
            )
        return on

    # -- the rest -------------------------------------------------------------------------
    @_authorized
    async def get_targets(
        self, request: web.Request, entry: SessionEntry, sender: Sender
    ) -> web.Response:
        node = request.query.get("node", "")
        if sender.nodes is not None and node not in sender.nodes:
            metrics.INGEST_REJECTIONS.labels(reason="forbidden").inc()
            return _json(
                403,
                f"node {node[:253]!r} is not the node of the sender ({sender.describe()})",
            )
        self._origins_of(entry)  # what an agent is told to profile, its batches may claim
        pods = [
            {"uid": t.uid, "name": t.name, "namespace": t.namespace} for t in entry.targets_on(node)
        ]
        # A closed session drains like Aggregating even before reconcile writes the phase.
        phase = Phase.AGGREGATING if entry.closed and entry.phase in ACCEPTS_DATA else entry.phase
        return _json(200, "", phase=phase.value, endTime=entry.end_time, pods=pods)

    async def get_metrics(self, request: web.Request) -> web.Response:
        if self.metrics_token:
            auth = request.headers.get("Authorization", "")
            given = auth.removeprefix("Bearer ").strip().encode("utf-8", "surrogateescape")
            if not auth.startswith("Bearer ") or not hmac.compare_digest(given, self.metrics_token):
                return await slow_clients.answer_and_close(
                    request,
                    _json(401, "/metrics needs the scrape token (Authorization: Bearer <token>)"),
                )
        metrics.set_phases(self.registry.phases())
        return web.Response(
            body=metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4"}
        )

    async def get_healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")


def _first_line(exc: BaseException) -> str:
    return str(getattr(exc, "orig", exc)).splitlines()[0][:200] if str(exc) else ""


async def serve(api: IngestApi, host: str, port: int) -> web.AppRunner:
    """Start listening; the caller keeps the runner and calls cleanup() at shutdown."""
    runner = web.AppRunner(
        api.app(), access_log=None, **SERVER_OPTIONS, **api.timeouts.server_options()
    )
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("ingest API and /metrics listening on %s:%d", host, port)
    return runner
