"""Light agents going deep prove who they are with their own pod's ServiceAccount token
(`--agent-auth serviceaccount --light-daemonset NS/NAME`), and a batch names only pods that
exist on its node; on the real control plane, TokenReview by the real API server, tokens
minted by TokenRequest bound to the pods a real DaemonSet made (kwok runs no kubelet).

The light agent pod on node A heartbeats for A, gets the session handed over with no
session token in the answer, and its batches for A store. Refused, each naming why, and
storing nothing: a heartbeat of A's pod claiming node B, a heartbeat with a made-up token
(no shared light token exists), a pod wearing the light agent's labels and ServiceAccount
but not of its DaemonSet, a batch of A's light agent for node B, a batch of B's light agent
(the session is not handed to it on B) and the session's shared token. A batch of A's own
light agent naming a pod that does not exist on A, or one that runs on another node, is
stored without that claim.
"""

from __future__ import annotations

import json
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kubeprof.agent.cluster.client import IngestClient, OperatorClient, Outcome
from kubeprof.model import Batch, ProcessInfo
from kubeprof.protocol import routes
from kubeprof.protocol.codec import encode
from kubeprof.protocol.light import Answer, Heartbeat
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster
from tests.e2e.test_agent_identity import _pod, _token

pytestmark = pytest.mark.e2e

SESSION, APP, LIGHT = "lightid", "lightid-app", "kp-light"
LIGHT_NS = f"e2e-lightid-sys-{uuid.uuid4().hex[:6]}"
LIGHT_LABELS = {"app.kubernetes.io/name": "kubeprof", "app.kubernetes.io/component": "light-agent"}


def _daemonset() -> str:
    """The light agents' DaemonSet as the chart deploys it (labels, ServiceAccount)."""
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": LIGHT, "namespace": LIGHT_NS, "labels": LIGHT_LABELS},
            "spec": {
                "selector": {"matchLabels": LIGHT_LABELS},
                "template": {
                    "metadata": {"labels": LIGHT_LABELS},
                    "spec": {
                        "serviceAccountName": LIGHT,
                        "nodeSelector": {"nvidia.com/gpu.present": "true"},
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "light-agent", "image": "registry.invalid/x:0"}],
                    },
                },
            },
        }
    )


@pytest.fixture(scope="module")
def operator(k8s_cluster: Cluster, postgres_dsn):
    h.apply_crd(k8s_cluster)
    d = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-lightid-"))
    args = ("--light-daemonset", f"{LIGHT_NS}/{LIGHT}", "--light-grace", "0")
    op = h.Operator(
        k8s_cluster, postgres_dsn.url, d, agent_auth="serviceaccount", args=args
    ).start()
    yield op
    op.stop()
    print(f"\noperator log: {op.workdir}")


def _beat(url: str, token: str, node: str) -> tuple[int, str, Answer | None]:
    got = OperatorClient(url, token, timeout_s=10).call(
        "POST",
        routes.LIGHT_ASSIGNMENTS,
        json.dumps(Heartbeat(node, True).to_json()).encode(),
        {"Content-Type": "application/json"},
    )
    answer = Answer.from_json(got.data) if got.status == 200 else None
    return got.status, got.detail, answer


@dataclass
class World:
    ns: str
    a: str
    b: str
    targets: dict[str, dict]  # node -> target pod
    light: dict[str, dict]  # node -> light agent pod
    answer: Answer  # A's heartbeat answer once the session is handed over


@pytest.fixture(scope="module")
def world(k8s_cluster: Cluster, operator):
    c = k8s_cluster
    c.kubectl("create", "namespace", LIGHT_NS)
    c.kubectl("create", "serviceaccount", LIGHT, "-n", LIGHT_NS)
    c.kubectl("apply", "-f", "-", stdin=_daemonset())
    gpu = c.kubectl(
        "get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "name"
    ).stdout.split()
    a, b = sorted(n.removeprefix("node/") for n in gpu)[:2]

    def light_pods() -> dict[str, dict]:
        sel = "app.kubernetes.io/component=light-agent"
        pods = h.get_json(c, "get", "pods", "-n", LIGHT_NS, "-l", sel) or {}
        by_node = {p["spec"].get("nodeName"): p for p in pods.get("items", [])}
        return by_node if {a, b} <= set(by_node) else {}

    light = h.poll(light_pods, 90, "light agent pods on A and B")
    token_a = _token(c, LIGHT_NS, LIGHT, light[a])
    stop = threading.Event()

    def beat() -> None:  # A's light agent calls in, as `kubeprof agent --light --deep` does
        while not stop.is_set():
            _beat(operator.url, token_a, a)
            stop.wait(2)

    threading.Thread(target=beat, daemon=True).start()
    ns = f"e2e-lightid-{uuid.uuid4().hex[:6]}"
    c.kubectl("create", "namespace", ns)
    for name, node in (("t-a", a), ("t-b", b)):
        c.kubectl("apply", "-f", "-", stdin=_pod(ns, name, node, {"app": APP}))
    h.poll(lambda: len(h.running_pods(c, ns, APP)) == 2, 60, "both target pods Running")
    pods = {p["spec"]["nodeName"]: p for p in h.running_pods(c, ns, APP)}
    c.kubectl("apply", "-f", "-", stdin=h.session_yaml(SESSION, ns, APP, "10m"))
    h.poll(lambda: h.phase(c, ns, SESSION) == "Running", 60, "session Running")

    def handed() -> Answer | None:
        status, _detail, answer = _beat(operator.url, token_a, a)
        return answer if status == 200 and answer and answer.assignments else None

    answer = h.poll(handed, 60, "the session handed to A's light agent")
    try:
        yield World(ns, a, b, pods, light, answer)
    finally:
        stop.set()
        c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        c.kubectl("delete", "namespace", LIGHT_NS, "--wait=false", check=False)


def _batch(node: str, pod_uid: str, bid: str, pid: int = 41) -> bytes:
    procs = (ProcessInfo(pid, 1, "python", "python train.py", pod_uid=pod_uid),)
    return encode(Batch(processes=procs), batch_id=bid, node=node)


def _post(url: str, ns: str, token: str, node: str, pod_uid: str, bid: str, pid: int = 41):
    """POST one batch until the answer is not 503 (a pod UID is checked against a fresh
    listing of the node's pods, at most one per few seconds: the others are told to retry)."""
    client = IngestClient(url, ns, SESSION, token)
    body = _batch(node, pod_uid, bid, pid)
    return h.poll(lambda: (r := client.post_batch(body, bid)).status != 503 and r, 30, bid)


def _stored(libpq: str, ns: str) -> set[str]:
    return h.stored_batch_ids(libpq, ns, SESSION)


def test_the_light_agents_own_token_heartbeats_and_stores_for_its_node_only(
    k8s_cluster: Cluster, operator, world, postgres_dsn
):
    c, w = k8s_cluster, world
    (a,) = w.answer.assignments
    assert (a.namespace, a.session, a.token) == (w.ns, SESSION, "")  # no shared token handed
    token_a = _token(c, LIGHT_NS, LIGHT, w.light[w.a])
    uid_a = w.targets[w.a]["metadata"]["uid"]
    ok = _post(operator.url, w.ns, token_a, w.a, uid_a, "light-good")
    assert (ok.status, ok.data.get("duplicate")) == (200, False), ok
    assert "light-good" in _stored(postgres_dsn.libpq, w.ns)
    assert token_a not in operator.proc.text()


def test_every_other_light_credential_and_foreign_pod_is_refused_naming_why(
    k8s_cluster: Cluster, operator, world, postgres_dsn
):
    c, w = k8s_cluster, world
    la, lb = w.light[w.a], w.light[w.b]
    token_a, token_b = _token(c, LIGHT_NS, LIGHT, la), _token(c, LIGHT_NS, LIGHT, lb)
    # The light agents' component label and ServiceAccount, but no DaemonSet behind it (not
    # its selector's every label either: the DaemonSet controller would adopt and delete it).
    labels = {"app.kubernetes.io/component": "light-agent"}
    c.kubectl("apply", "-f", "-", stdin=_pod(LIGHT_NS, "impostor", w.a, labels, sa=LIGHT))
    impostor = h.poll(lambda: h.get_json(c, "get", "pod", "-n", LIGHT_NS, "impostor"), 30, "pod")
    token_i = _token(c, LIGHT_NS, LIGHT, impostor)
    # A pod that exists, but on node B; and a UID no pod has.
    c.kubectl("apply", "-f", "-", stdin=_pod(w.ns, "neighbour-b", w.b, {"app": "other"}))
    neighbour = h.poll(lambda: h.get_json(c, "get", "pod", "-n", w.ns, "neighbour-b"), 30, "pod")
    ghost = str(uuid.uuid4())
    name_a, name_b = la["metadata"]["name"], lb["metadata"]["name"]

    beats = {
        "A's pod claiming node B": (
            token_a,
            w.b,
            403,
            f"node: '{w.b}' is not the node of the sender (pod {LIGHT_NS}/{name_a} on node "
            f"{w.a}); a light agent speaks only for its own node",
        ),
        "a made-up token": ("not-a-shared-token", w.a, 403, "light agent token is not valid"),
        "a pod not of the light DaemonSet": (
            token_i,
            w.a,
            403,
            f"pod {LIGHT_NS}/impostor on node {w.a} (ServiceAccount {LIGHT_NS}/{LIGHT}) is not "
            f"a light agent pod of DaemonSet {LIGHT_NS}/{LIGHT}",
        ),
    }
    got_beats = {what: _beat(operator.url, t, node) for what, (t, node, _s, _m) in beats.items()}
    wrong = {
        what: got_beats[what][:2]
        for what, (_t, _n, status, why) in beats.items()
        if not (got_beats[what][0] == status and why in got_beats[what][1])
    }
    assert not wrong, wrong

    uid_a, uid_b = (w.targets[n]["metadata"]["uid"] for n in (w.a, w.b))
    batches = {
        "A's light agent for node B": (
            token_a,
            w.b,
            uid_b,
            f"node: '{w.b}' is not the node of the sender (pod {LIGHT_NS}/{name_a} on node {w.a})",
        ),
        "B's light agent, not handed the session": (
            token_b,
            w.b,
            uid_b,
            f"light agent pod {LIGHT_NS}/{name_b} on node {w.b} does not run this session",
        ),
        "a pod not of the light DaemonSet": (
            token_i,
            w.a,
            uid_a,
            f"is not a light agent pod of DaemonSet {LIGHT_NS}/{LIGHT}",
        ),
        "the session's shared token": (
            h.session_token(c, w.ns, SESSION),
            w.a,
            uid_a,
            "the session token is not accepted here",
        ),
    }
    before = _stored(postgres_dsn.libpq, w.ns)
    got = {}
    for i, (what, (token, node, pod_uid, _why)) in enumerate(batches.items()):
        bid = f"light-bad-{i}"
        got[what] = _post(operator.url, w.ns, token, node, pod_uid, bid)
    wrong = {
        what: (got[what].status, got[what].detail)
        for what, (*_x, why) in batches.items()
        if not (got[what].outcome is Outcome.FORBIDDEN and why in got[what].detail)
    }
    assert not wrong, wrong
    assert _stored(postgres_dsn.libpq, w.ns) == before  # none of them stored anything
    # A pod that is no target but runs on A (GPU sharing) is kept.
    c.kubectl("apply", "-f", "-", stdin=_pod(w.ns, "neighbour-a", w.a, {"app": "other"}))
    near = h.poll(lambda: h.get_json(c, "get", "pod", "-n", w.ns, "neighbour-a"), 30, "pod")
    ok = _post(operator.url, w.ns, token_a, w.a, near["metadata"]["uid"], "light-neighbour")
    assert ok.status == 200, ok
    # A pod the API does not list on A (made up, or running on B): the batch is stored
    # (the session's own records are not lost), the claim on that pod is not.
    for pid, uid in ((51, ghost), (52, neighbour["metadata"]["uid"])):
        ans = _post(operator.url, w.ns, token_a, w.a, uid, f"light-claim-{pid}", pid)
        assert ans.status == 200, ans
    claims = h.stored_pod_claims(postgres_dsn.libpq, w.ns, SESSION)
    assert claims[(w.a, 51)] == claims[(w.a, 52)] == "", claims
    log = operator.proc.text()
    assert not [t for t in (token_a, token_b, token_i) if t in log]  # no token logged
