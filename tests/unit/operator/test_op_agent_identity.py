"""Agent identity (issue 32): what a TokenReview answer proves, the binding to an agent pod
of the session, the bounded cache, and the ingest's use of both. The API server itself is
exercised by tests/e2e/test_agent_identity.py; here its answers are written out."""

import asyncio
import base64
import json
from datetime import UTC, datetime

import pytest
from aiohttp.test_utils import TestClient, TestServer

from kubeprof.model import Batch, ProcessInfo
from kubeprof.operator.agent_identity import (
    AUDIENCE,
    AgentIdentity,
    Denied,
    TokenReviews,
    check_agent,
    expiry,
    from_review,
)
from kubeprof.operator.build import build_daemonset, token_volume
from kubeprof.operator.config import OperatorConfig
from kubeprof.operator.db import BatchWriter, ensure_session
from kubeprof.operator.ingest import SERVER_OPTIONS, IngestApi
from kubeprof.operator.phases import Phase
from kubeprof.operator.registry import Registry, SessionEntry
from kubeprof.operator.spec import parse
from kubeprof.operator.targets import Target
from kubeprof.protocol.codec import encode
from kubeprof.storage import Store

EXTRA = "authentication.kubernetes.io/"


def _jwt(exp: float, sub: str = "x") -> str:
    def part(d: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256'})}.{part({'exp': exp, 'sub': sub})}.c2ln"


def _review(pod: str = "kubeprof-s-agent-x1", node: str = "n1", sa: str = "default") -> dict:
    return {
        "authenticated": True,
        "audiences": [AUDIENCE],
        "user": {
            "username": f"system:serviceaccount:ns:{sa}",
            "extra": {
                EXTRA + "pod-name": [pod],
                EXTRA + "pod-uid": ["uid-agent"],
                EXTRA + "node-name": [node],
            },
        },
    }


def _pod(name: str = "kubeprof-s-agent-x1", owner: str = "kubeprof-s-agent") -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": "uid-agent",
            "labels": {
                "kubeprof.dev/session": "s",
                "app.kubernetes.io/component": "agent",
                "kubeprof.dev/agent-shard": "0",
            },
            "ownerReferences": [{"kind": "DaemonSet", "name": owner, "controller": True}],
        },
        "spec": {"nodeName": "n1"},
    }


def test_a_review_proves_a_pod_bound_service_account_for_our_audience_only():
    assert from_review(_review()) == ("ns", "default", "kubeprof-s-agent-x1", "n1")
    refusals = {
        "expired": ({"authenticated": False, "error": "token has expired"}, 401, "expired"),
        "audience": ({**_review(), "audiences": ["api"]}, 401, f"audience {AUDIENCE}"),
        "user": (
            {**_review(), "user": {"username": "alice"}},
            403,
            "is not a ServiceAccount",
        ),
        "unbound": (
            {**_review(), "user": {"username": "system:serviceaccount:ns:default"}},
            403,
            "not bound to a pod",
        ),
    }
    for what, (status, code, why) in refusals.items():
        with pytest.raises(Denied) as err:
            from_review(status)
        assert err.value.status == code and why in str(err.value), what


def test_only_an_agent_pod_of_the_session_under_the_agents_account_passes():
    def names(shard: int) -> str:
        return "kubeprof-s-agent" if shard == 0 else f"kubeprof-s-agent-{shard}"

    good = AgentIdentity(
        "ns", "default", "p", "u", "n1", _pod()["metadata"]["labels"], "DaemonSet/kubeprof-s-agent"
    )
    check_agent(good, "ns", "s", names, "default")
    bad = {
        "namespace": (good.__class__(**{**_fields(good), "namespace": "other"}), "namespace ns"),
        "account": (good.__class__(**{**_fields(good), "service_account": "x"}), "ns/x"),
        "labels": (
            good.__class__(**{**_fields(good), "labels": {"kubeprof.dev/session": "t"}}),
            "not an agent pod",
        ),
        "owner": (
            good.__class__(**{**_fields(good), "owner": "ReplicaSet/kubeprof-s-agent"}),
            "not an agent pod",
        ),
    }
    for what, (who, why) in bad.items():
        with pytest.raises(Denied) as err:
            check_agent(who, "ns", "s", names, "default")
        assert err.value.status == 403 and why in str(err.value), what


def _fields(who: AgentIdentity) -> dict:
    return {f: getattr(who, f) for f in who.__slots__}  # type: ignore[attr-defined]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_answers_are_cached_never_past_the_tokens_expiry_and_the_cache_is_bounded():
    clock, calls = Clock(), []

    def review(token: str, audience: str) -> dict:
        calls.append(token)
        return _review() if token.endswith("c2ln") else {"authenticated": False}

    reviews = TokenReviews(review, lambda _ns, _n: _pod(), max_entries=3, clock=clock)
    token = _jwt(exp=clock.now + 20)
    assert expiry(token) == clock.now + 20
    assert reviews.cached(token, "ns") is None
    who = reviews.identity(token, "ns")
    assert (who.node, who.owner) == ("n1", "DaemonSet/kubeprof-s-agent")
    assert reviews.cached(token, "ns") == who and calls == [token]
    clock.now += 21  # past the token's exp (before the 60 s ttl): asked again
    assert reviews.cached(token, "ns") is None
    # A refusal is cached too, for a shorter time.
    with pytest.raises(Denied):
        reviews.identity("bad", "ns")
    with pytest.raises(Denied):
        reviews.cached("bad", "ns")
    clock.now += 11
    assert reviews.cached("bad", "ns") is None
    for i in range(10):
        reviews.identity(_jwt(exp=clock.now + 100, sub=str(i)), "ns")
    assert len(reviews) == 3
    # Presented for a session of another namespace: refused without looking the pod up.
    pods_asked = []
    other = TokenReviews(review, lambda ns, n: pods_asked.append(ns) or _pod(), clock=clock)
    with pytest.raises(Denied) as err:
        other.identity(token, "team-b")
    assert err.value.status == 403 and "not from namespace team-b" in str(err.value)
    assert pods_asked == [] and other.identity(token, "ns").pod == "kubeprof-s-agent-x1"


def test_the_daemonset_mounts_the_pods_own_token_or_the_session_secret():
    session = {
        "metadata": {"name": "s", "namespace": "ns", "uid": "u-1"},
        "spec": {
            "target": {"namespace": "ns", "podSelector": {"matchLabels": {"app": "x"}}},
            "duration": "1m",
        },
    }
    cfg = OperatorConfig(database_url="sqlite://")
    vol = token_volume(session, cfg)
    assert vol["projected"]["sources"] == [
        {"serviceAccountToken": {"audience": AUDIENCE, "expirationSeconds": 600, "path": "token"}}
    ]
    ds = build_daemonset(session, parse(session["spec"]), ["n1"], cfg, 1.0)
    pod = ds["spec"]["template"]["spec"]
    assert vol in pod["volumes"] and pod["automountServiceAccountToken"] is False
    legacy = token_volume(
        session, OperatorConfig(database_url="sqlite://", agent_auth="session-token")
    )
    assert legacy["secret"]["secretName"] == "kubeprof-s-ingest"


def test_with_reviews_the_session_token_counts_only_on_light_agents_nodes(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path}/k.db")
    sid = ensure_session(
        store.engine, "ns", "s", "uid-s", hz=99, started_at=datetime.now(UTC), meta={}
    )
    reg = Registry()
    targets = [Target("uid-p1", "p1", "ns", "n1"), Target("uid-p2", "p2", "ns", "n2")]
    reg.put(SessionEntry("ns", "s", "uid-s", sid, "tok", Phase.RUNNING, 0.0, targets))
    reviews = TokenReviews(lambda _t, _a: _review(), lambda _ns, _n: _pod())
    api = IngestApi(reg, BatchWriter(store.engine), startup_grace_s=0, reviews=reviews)
    api.session_token_nodes = lambda e: {"n2"} if e.name == "s" else set()
    agent = _jwt(exp=4e9)

    def body(node: str, pod_uid: str, bid: str) -> bytes:
        return encode(
            Batch(processes=(ProcessInfo(7, 1, "py", "py", pod_uid=pod_uid),)),
            batch_id=bid,
            node=node,
        )

    async def go() -> list[tuple[int, str]]:
        out = []
        async with TestClient(TestServer(api.app(), **SERVER_OPTIONS)) as client:
            for token, node, pod, bid in (
                ("tok", "n1", "uid-p1", "b1"),  # session token, not a light agent's node
                ("tok", "n2", "uid-p2", "b2"),  # session token on the light agent's node
                (agent, "n2", "uid-p2", "b3"),  # the agent of n1 speaking for n2
                (agent, "n1", "uid-p2", "b4"),  # ... or for n2's pod
                (agent, "n1", "uid-p1", "b5"),  # its own node and pod
            ):
                r = await client.post(
                    "/v1/sessions/ns/s/batches",
                    data=body(node, pod, bid),
                    headers={"Authorization": f"Bearer {token}"},
                )
                out.append((r.status, (await r.json())["message"]))
        return out

    try:
        got = asyncio.run(go())
    finally:
        api.pool.shutdown()
        store.close()
    assert [s for s, _ in got] == [403, 200, 403, 403, 200], got
    assert "taken only for nodes light agents run the session on" in got[0][1]
    assert "not the node of the sender (pod ns/kubeprof-s-agent-x1 on node n1)" in got[2][1]
    assert "runs on node n2, not on n1" in got[3][1]
    assert reviews.reviews == 1  # one review, then the cache


def test_light_agents_nodes_are_unknown_until_the_hand_over_table_is_loaded():
    from kubeprof.operator.light_deep import Handed, LightAgents

    clock = Clock()
    light = LightAgents("light-token", grace_s=15, clock=clock)
    entry = SessionEntry("ns", "s", "uid-s", 1, "tok", Phase.RUNNING)
    assert light.light_nodes(entry) is None  # just started: the ingest answers 503, retry
    clock.now += 16
    assert light.light_nodes(entry) == frozenset()
    light.hand(
        "ns", "s", Handed("uid-s", frozenset({"n2"}), frozenset({"n1"}), ("cpu",), 99, 1.0, 0.0)
    )
    assert light.light_nodes(entry) == {"n2"}
    again = SessionEntry("ns", "s", "uid-new", 2, "tok", Phase.RUNNING)  # re-created
    assert light.light_nodes(again) == frozenset()
