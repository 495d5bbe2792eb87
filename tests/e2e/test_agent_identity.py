"""Agents prove who they are with their pod's ServiceAccount token (`--agent-auth
serviceaccount`, the default), on the real control plane: TokenReview by the real API
server, tokens minted by the TokenRequest API bound to real pod objects, as the kubelet
mints the projected token of the agent DaemonSet's pods (kwok runs no kubelet).

A token for another audience, of another ServiceAccount, of another namespace, not bound
to a pod, of a pod that is no agent of the session, of another session's agent, of an agent
on another node, an expired one (signed with the cluster's own key), the session's shared
token, and a batch claiming another node's pod are each refused with 401/403 naming why,
and none of them stores anything; the agent's own token, for its own node, stores.
"""

from __future__ import annotations

import base64
import json
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import yaml
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

from kubeprof.agent.cluster.client import IngestClient, Outcome
from kubeprof.model import Batch, ProcessInfo
from kubeprof.operator.agent_identity import AUDIENCE
from kubeprof.protocol.codec import encode
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.e2e

SESSION, OTHER, APP = "ident", "ident-other", "ident-app"
AGENT_LABELS = "kubeprof.dev/session={},app.kubernetes.io/component=agent"


@pytest.fixture(scope="module")
def operator(k8s_cluster: Cluster, postgres_dsn):
    h.apply_crd(k8s_cluster)
    d = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-ident-"))
    op = h.Operator(k8s_cluster, postgres_dsn.url, d, agent_auth="serviceaccount").start()
    yield op
    op.stop()
    print(f"\noperator log: {op.workdir}")


def _pod(ns: str, name: str, node: str, labels: dict[str, str], sa: str = "default") -> str:
    """A bare pod on `node` (kwok marks it Running; nodeName skips the scheduler)."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {
                "nodeName": node,
                "serviceAccountName": sa,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "main", "image": "registry.invalid/x:0"}],
            },
        }
    )


def _token(c: Cluster, ns: str, sa: str, pod: dict | None, audience: str = AUDIENCE) -> str:
    """A TokenRequest token, bound to `pod` when given (what the kubelet projects)."""
    bound = (
        [
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            pod["metadata"]["name"],
            "--bound-object-uid",
            pod["metadata"]["uid"],
        ]
        if pod
        else []
    )
    args = ["create", "token", sa, "-n", ns, "--audience", audience, "--duration", "600s"]
    return c.kubectl(*args, *bound).stdout.strip()


def _expired(c: Cluster, token: str) -> str:
    """`token` with its times moved an hour back, signed again with the cluster's own
    ServiceAccount signing key: genuine in every respect but that it has expired."""
    header, payload, _sig = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    now = int(time.time())
    claims.update(iat=now - 3600, nbf=now - 3600, exp=now - 3000)
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    key = serialization.load_pem_private_key(c.pki.sa_key.read_bytes(), password=None)
    sig = key.sign(f"{header}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())  # type: ignore[union-attr,call-arg]
    return f"{header}.{body}.{base64.urlsafe_b64encode(sig).rstrip(b'=').decode()}"


def _agents(c: Cluster, ns: str, session: str) -> dict[str, dict]:
    """The session's agent pods by node (made by its DaemonSet)."""
    pods = h.get_json(c, "get", "pods", "-n", ns, "-l", AGENT_LABELS.format(session)) or {}
    return {p["spec"]["nodeName"]: p for p in pods.get("items", []) if p["spec"].get("nodeName")}


@dataclass
class World:
    ns: str
    a: str  # two GPU nodes, one target pod on each
    b: str
    target_a: dict
    target_b: dict
    agents: dict[str, dict]  # SESSION's agent pods by node
    other_agents: dict[str, dict]  # OTHER's


@pytest.fixture(scope="module")
def world(k8s_cluster: Cluster, operator) -> World:
    c = k8s_cluster
    ns = f"e2e-ident-{uuid.uuid4().hex[:6]}"
    c.kubectl("create", "namespace", ns)
    gpu = c.kubectl(
        "get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "name"
    ).stdout.split()
    a, b = sorted(n.removeprefix("node/") for n in gpu)[:2]
    for name, node in (("t-a", a), ("t-b", b)):
        c.kubectl("apply", "-f", "-", stdin=_pod(ns, name, node, {"app": APP}))
    h.poll(lambda: len(h.running_pods(c, ns, APP)) == 2, 60, "both target pods Running")
    pods = {p["metadata"]["name"]: p for p in h.running_pods(c, ns, APP)}
    for name in (SESSION, OTHER):
        c.kubectl("apply", "-f", "-", stdin=h.session_yaml(name, ns, APP, "10m"))
    for name in (SESSION, OTHER):
        h.poll(lambda n=name: h.phase(c, ns, n) == "Running", 60, f"{name} Running")
        h.poll(lambda n=name: set(_agents(c, ns, n)) == {a, b}, 90, f"{name}'s agent pods")
    yield World(ns, a, b, pods["t-a"], pods["t-b"], _agents(c, ns, SESSION), _agents(c, ns, OTHER))
    c.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _batch(w: World, node: str, target: dict, bid: str) -> bytes:
    uid = target["metadata"]["uid"]
    return encode(
        Batch(processes=(ProcessInfo(41, 1, "python", "python train.py", pod_uid=uid),)),
        batch_id=bid,
        node=node,
    )


def _stored_batches(libpq: str, ns: str) -> int:
    with psycopg.connect(libpq) as conn:
        row = conn.execute(
            "SELECT count(*) FROM ingested_batches b JOIN sessions s ON s.id = b.session_id "
            "WHERE s.name LIKE %s",
            (f"{ns}/{SESSION}@%",),
        ).fetchone()
    return int(row[0]) if row else 0


def test_the_agents_own_token_stores_for_its_own_node(k8s_cluster: Cluster, operator, world):
    c, w = k8s_cluster, world
    token = _token(c, w.ns, "default", w.agents[w.a])
    agent = IngestClient(operator.url, w.ns, SESSION, token)
    seen = agent.targets(w.a)
    assert seen.status == 200, seen
    assert [p["name"] for p in seen.data["pods"]] == ["t-a"]
    ans = agent.post_batch(_batch(w, w.a, w.target_a, "good-1"), "good-1")
    assert (ans.status, ans.data.get("duplicate")) == (200, False), ans
    # Its own node only: the other node's targets are not its business.
    other = agent.targets(w.b)
    assert other.status == 403 and "not the node of the sender" in other.detail, other
    assert token not in operator.proc.text()


def test_every_other_credential_is_refused_naming_why(
    k8s_cluster: Cluster, operator, world, postgres_dsn
):
    c, w, ns = k8s_cluster, world, world.ns
    agent_a, agent_b = w.agents[w.a], w.agents[w.b]
    # The agent's session and component labels; not its shard label, which would let the
    # DaemonSet controller adopt the pod (and delete it as a second pod on its node).
    labels = {
        k: agent_a["metadata"]["labels"][k]
        for k in ("kubeprof.dev/session", "app.kubernetes.io/component")
    }
    # Another ServiceAccount's pod, even one wearing the agent's labels.
    c.kubectl("create", "serviceaccount", "intruder", "-n", ns)
    c.kubectl("apply", "-f", "-", stdin=_pod(ns, "intruder", w.a, labels, sa="intruder"))
    # The agents' own ServiceAccount, the agent's labels, but no agent DaemonSet behind it.
    c.kubectl("apply", "-f", "-", stdin=_pod(ns, "impostor", w.a, labels))
    # A pod of another namespace (the operator may not even list pods there).
    elsewhere = f"{ns}-x"
    c.kubectl("create", "namespace", elsewhere)
    h.poll(lambda: h.get_json(c, "get", "serviceaccount", "-n", elsewhere, "default"), 30, "SA")
    c.kubectl("apply", "-f", "-", stdin=_pod(elsewhere, "stranger", w.a, labels))
    intruder = h.poll(lambda: h.get_json(c, "get", "pod", "-n", ns, "intruder"), 30, "pod")
    stranger = h.poll(lambda: h.get_json(c, "get", "pod", "-n", elsewhere, "stranger"), 30, "pod")
    impostor = h.poll(lambda: h.get_json(c, "get", "pod", "-n", ns, "impostor"), 30, "pod")
    own = _token(c, ns, "default", agent_a)

    cases = {
        # name: (token, node the batch claims, target pod of its process, status, reason)
        "another audience": (
            _token(c, ns, "default", agent_a, audience="https://kubernetes.default.svc"),
            w.a,
            w.target_a,
            401,
            f'is invalid for the target audiences ["{AUDIENCE}"]',  # the API server's words
        ),
        "another ServiceAccount": (
            _token(c, ns, "intruder", intruder),
            w.a,
            w.target_a,
            403,
            f"ServiceAccount {ns}/intruder",
        ),
        "another namespace": (
            _token(c, elsewhere, "default", stranger),
            w.a,
            w.target_a,
            403,
            f"token of ServiceAccount {elsewhere}/default (pod stranger) is not from namespace "
            f"{ns}",
        ),
        "not bound to a pod": (
            _token(c, ns, "default", None),
            w.a,
            w.target_a,
            403,
            "is not bound to a pod",
        ),
        "a pod that is no agent": (
            _token(c, ns, "default", impostor),
            w.a,
            w.target_a,
            403,
            f"pod {ns}/impostor on node {w.a} is not an agent pod of this session",
        ),
        "another session's agent": (
            _token(c, ns, "default", w.other_agents[w.a]),
            w.a,
            w.target_a,
            403,
            "is not an agent pod of this session",
        ),
        "an agent on another node": (
            _token(c, ns, "default", agent_b),
            w.a,
            w.target_a,
            403,
            f"is not the node of the sender (pod {ns}/{agent_b['metadata']['name']} on node {w.b})",
        ),
        "expired": (_expired(c, own), w.a, w.target_a, 401, "expired"),
        "the session's shared token": (
            h.session_token(c, ns, SESSION),
            w.a,
            w.target_a,
            401,
            "the session token is not accepted here",
        ),
        "another node's pod in the batch": (
            own,
            w.a,
            w.target_b,
            403,
            f"pod {w.target_b['metadata']['uid']} runs on node {w.b}, not on {w.a}",
        ),
    }
    before = _stored_batches(postgres_dsn.libpq, ns)
    got = {}
    for i, (what, (token, node, target, _status, _why)) in enumerate(cases.items()):
        bid = f"bad-{i}"
        ans = IngestClient(operator.url, ns, SESSION, token).post_batch(
            _batch(w, node, target, bid), bid
        )
        got[what] = ans
    wrong = {
        what: (got[what].status, got[what].detail)
        for what, case in cases.items()
        if not (
            got[what].status == case[3]
            and got[what].outcome is Outcome.FORBIDDEN
            and case[4] in got[what].detail
        )
    }
    assert not wrong, wrong
    assert _stored_batches(postgres_dsn.libpq, ns) == before  # none of them stored anything
    log = operator.proc.text()
    assert all(t[0] not in log for t in cases.values())  # no token in the operator's log
    c.kubectl("delete", "namespace", elsewhere, "--wait=false", check=False)
