"""Tenancy, selectors and agent admission on the real control plane.

- a session targeting another namespace is refused with a message by an operator in its
  default mode, and never lists, pins or profiles anything there;
- with --allow-cross-namespace it runs, but only for a creator who may list pods in the
  target namespace: the admission policy asks the API server's authorizer for the
  requesting user (impersonated here) and refuses the others at creation;
- agents forbidden by Pod Security "baseline" give the session a status naming it;
- label selectors select exactly the pods `kubectl get pods -l` and the API server's own
  LabelSelector evaluation (a PodDisruptionBudget's expectedPods, counted by the
  controller-manager) select; invalid ones are refused like the API server refuses them,
  and one stored before the CRD checked it fails the session instead of a retry loop.
"""

from __future__ import annotations

import copy
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml

from kubeprof.operator.selector import to_query
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.e2e

POLICY = h.ROOT / "crds" / "profilingsession-admission.yaml"
RUN = uuid.uuid4().hex[:6]
NS = {k: f"e2e-ten-{k}-{RUN}" for k in ("att", "vic", "team", "psa", "sel")}


@pytest.fixture(scope="module")
def cluster(k8s_cluster: Cluster):
    h.apply_crd(k8s_cluster)
    for ns in NS.values():
        k8s_cluster.kubectl("create", "namespace", ns)
    yield k8s_cluster
    for ns in NS.values():
        k8s_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _operator(
    c: Cluster, postgres_dsn, namespaces: list[str], *args: str, cross: bool = False
) -> h.Operator:
    d = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-ten-"))
    ns_args = [a for ns in namespaces for a in ("--namespace", ns)]
    # The chart's rules for the same settings: RoleBindings in the watched namespaces only
    # (and, for cross-namespace targets, listing pods in any namespace).
    values = {"operator": {"watchNamespaces": namespaces, "allowCrossNamespace": cross}}
    return h.Operator(c, postgres_dsn.url, d, args=(*ns_args, *args), chart_values=values).start()


@pytest.fixture(scope="module")
def strict(cluster: Cluster, postgres_dsn):
    """An operator in its default mode (no cross-namespace targets)."""
    op = _operator(cluster, postgres_dsn, [NS["att"], NS["psa"], NS["sel"]])
    yield op
    op.stop()
    print(f"\nstrict operator log: {op.workdir}")


@pytest.fixture(scope="module")
def open_op(cluster: Cluster, postgres_dsn):
    """An operator allowing cross-namespace targets, watching only the team namespace, with
    the chart's rules for those values (before 91d98ad they refused listing the target
    namespace's pods: HTTP 403)."""
    op = _operator(cluster, postgres_dsn, [NS["team"]], "--allow-cross-namespace", cross=True)
    yield op
    op.stop()
    print(f"\nopen operator log: {op.workdir}")


@pytest.fixture(scope="module")
def victim_pod(cluster: Cluster) -> dict:
    cluster.kubectl("apply", "-f", "-", stdin=h.deployment_yaml("secret-sauce", NS["vic"]))
    return h.poll(
        lambda: h.running_pods(cluster, NS["vic"], "secret-sauce"), 60, "victim pod Running"
    )[0]


def _status(c: Cluster, ns: str, name: str) -> dict:
    return h.session(c, ns, name).get("status") or {}


def _cross_session(name: str, ns: str) -> str:
    doc = yaml.safe_load(h.session_yaml(name, ns, "secret-sauce", "10m"))
    doc["spec"]["target"]["namespace"] = NS["vic"]
    return yaml.safe_dump(doc)


def test_cross_namespace_session_is_refused_by_default(cluster: Cluster, strict, victim_pod):
    c, att = cluster, NS["att"]
    c.kubectl("apply", "-f", "-", stdin=_cross_session("peek", att))
    h.poll(lambda: _status(c, att, "peek").get("phase") == "Failed", 30, "peek Failed")
    st = _status(c, att, "peek")
    assert st["reason"] == "CrossNamespaceNotAllowed", st
    assert f"create the session in namespace '{NS['vic']}'" in st["message"]
    assert "--allow-cross-namespace" in st["message"]
    cond = {x["type"]: x for x in st["conditions"]}["Completed"]
    assert (cond["status"], cond["reason"]) == ("False", "CrossNamespaceNotAllowed")
    time.sleep(3)  # a few more reconcile passes: still nothing made
    assert not h.get_json(c, "get", "ds", "-n", att, "kubeprof-peek-agent")
    assert not h.get_json(c, "get", "secret", "-n", att, "kubeprof-peek-ingest")
    assert "pods" not in st or st.get("pods") in (0, None)
    assert strict.proc.alive()


def _as(c: Cluster, user: str, *args: str, stdin: str | None = None):
    return c.kubectl(*args, f"--as={user}", stdin=stdin, check=False)


def test_cross_namespace_needs_the_flag_and_the_creators_right_to_list_pods(
    cluster: Cluster, open_op, victim_pod
):
    c, team, vic = cluster, NS["team"], NS["vic"]
    user = f"alice-{RUN}"
    c.kubectl("apply", "-f", str(POLICY))
    c.kubectl(
        "create",
        "clusterrole",
        f"kps-{RUN}",
        "--verb=create,get,list,delete",
        "--resource=profilingsessions.kubeprof.dev",
    )
    c.kubectl(
        "create",
        "rolebinding",
        "alice-kps",
        "-n",
        team,
        f"--clusterrole=kps-{RUN}",
        f"--user={user}",
    )
    try:
        time.sleep(3)  # the policy must be in force before the sessions are created
        r = _as(c, user, "apply", "-f", "-", stdin=_cross_session("borrow", team))
        assert r.returncode != 0, r.stdout
        assert f"{user} may not list pods in namespace {vic}" in r.stderr, r.stderr
        assert not h.get_json(c, "get", "profilingsession", "-n", team, "borrow")

        c.kubectl(
            "create", "rolebinding", "alice-view", "-n", vic, "--clusterrole=view", f"--user={user}"
        )
        h.poll(
            lambda: _as(c, user, "auth", "can-i", "list", "pods", "-n", vic).returncode == 0,
            30,
            "alice may list pods in the victim namespace",
        )
        r = _as(c, user, "apply", "-f", "-", stdin=_cross_session("borrow", team))
        assert r.returncode == 0, r.stderr
        h.poll(lambda: _status(c, team, "borrow").get("phase") == "Running", 60, "borrow Running")
        st = _status(c, team, "borrow")
        assert st["pods"] == 1 and st["nodes"] == 1, st
        ds = h.poll(
            lambda: h.get_json(c, "get", "ds", "-n", team, "kubeprof-borrow-agent"),
            30,
            "agent DaemonSet in the session's namespace",
        )
        terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert [t["matchFields"][0]["values"][0] for t in terms] == [victim_pod["spec"]["nodeName"]]
        h.delete_session(c, team, "borrow")
    finally:
        c.kubectl("delete", "-f", str(POLICY), "--wait=false", check=False)
        c.kubectl("delete", "clusterrole", f"kps-{RUN}", check=False)


def test_agents_forbidden_by_pod_security_baseline_are_named_in_the_status(
    cluster: Cluster, strict
):
    c, ns = cluster, NS["psa"]
    c.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=baseline")
    c.kubectl("apply", "-f", "-", stdin=h.deployment_yaml("trainer", ns))  # baseline-clean
    h.poll(lambda: h.running_pods(c, ns, "trainer"), 60, "workload pod Running")
    c.kubectl("apply", "-f", "-", stdin=h.session_yaml("guarded", ns, "trainer", "10m"))
    # The DaemonSet controller may record the event before it counts the desired pods.
    h.poll(
        lambda: (
            (_status(c, ns, "guarded").get("reason"), _status(c, ns, "guarded").get("agentsReady"))
            == ("AgentsForbiddenByPodSecurity", "0/1")
        ),
        60,
        "the Pod Security reason, 0/1",
    )
    st = _status(c, ns, "guarded")
    assert st["phase"] == "Running" and st["agentsReady"] == "0/1", st
    assert 'Pod Security "baseline:latest"' in st["message"], st["message"]
    assert "hostPID=true" in st["message"]  # the API server's own words, passed on
    assert "pod-security.kubernetes.io/enforce=privileged" in st["message"]
    cond = {x["type"]: x for x in st["conditions"]}["AgentsReady"]
    assert (cond["status"], cond["reason"]) == ("False", "AgentsForbiddenByPodSecurity")
    # The message comes from the DaemonSet controller's event, read from the real cluster.
    events = h.get_json(
        c,
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        "involvedObject.name=kubeprof-guarded-agent,reason=FailedCreate",
    )
    assert events and events["items"], events

    c.kubectl(
        "label", "namespace", ns, "pod-security.kubernetes.io/enforce=privileged", "--overwrite"
    )
    h.poll(
        lambda: _status(c, ns, "guarded").get("agentsReady") == "1/1",
        120,
        "agents admitted once the namespace allows privileged pods",
    )
    assert _status(c, ns, "guarded")["reason"] == "Profiling"
    h.delete_session(c, ns, "guarded")


# --- selectors ------------------------------------------------------------------------------

PODS = {  # name -> labels
    "p-web": {"app": "a", "tier": "web", "example.com/team": "x"},
    "p-db": {"app": "a", "tier": "db"},
    "p-gpu": {"app": "b", "tier": "web", "gpu": ""},
    "p-bare": {"app": "b"},
    "p-cache": {"tier": "cache"},
}

VALID = [
    (
        {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
        {"p-web", "p-db", "p-gpu", "p-cache"},
    ),
    ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, {"p-cache"}),
    # NotIn also matches pods without the key.
    (
        {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["web"]}]},
        {"p-db", "p-bare", "p-cache"},
    ),
    (
        {
            "matchLabels": {"app": "a"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "db"]}],
        },
        {"p-web", "p-db"},
    ),
    ({"matchLabels": {"gpu": ""}}, {"p-gpu"}),  # an empty value is a value
    ({"matchLabels": {"example.com/team": "x"}}, {"p-web"}),
    (
        {
            "matchExpressions": [
                {"key": "app", "operator": "In", "values": ["b"]},
                {"key": "gpu", "operator": "DoesNotExist"},
            ]
        },
        {"p-bare"},
    ),
]

INVALID = [
    ({"matchExpressions": [{"key": " ", "operator": "Exists"}]}, "matchExpressions[0].key"),
    ({"matchLabels": {"": "a"}}, "matchLabels"),
    ({"matchLabels": {"app": "a b"}}, "matchLabels"),
    (
        {"matchExpressions": [{"key": "Bad.Prefix/x", "operator": "Exists"}]},
        "matchExpressions[0].key",
    ),
]


def _pod(name: str, ns: str, labels: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "containers": [{"name": "main", "image": "registry.invalid/x:0"}],
        },
    }


def _pdb(name: str, ns: str, selector: dict) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minAvailable": 0, "selector": selector},
    }


def _apply(c: Cluster, doc: dict):
    return c.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(doc), check=False)


@pytest.fixture(scope="module")
def labelled_pods(cluster: Cluster) -> str:
    ns = NS["sel"]
    for name, labels in PODS.items():
        assert _apply(cluster, _pod(name, ns, labels)).returncode == 0
    h.poll(
        lambda: (
            len(
                [
                    p
                    for p in (h.get_json(cluster, "get", "pods", "-n", ns) or {}).get("items", [])
                    if p["status"].get("phase") == "Running"
                ]
            )
            == len(PODS)
        ),
        60,
        "labelled pods Running",
    )
    return ns


def _kubectl_names(c: Cluster, ns: str, query: str) -> set[str]:
    got = h.get_json(c, "get", "pods", "-n", ns, "-l", query)
    assert got is not None, query
    return {p["metadata"]["name"] for p in got["items"]}


@pytest.fixture(scope="module")
def oracles(cluster: Cluster, labelled_pods: str) -> list[tuple[set[str], int]]:
    """Per VALID case, before any session (and so any agent pod) exists in the namespace:
    the pods `kubectl get pods -l <query>` lists, and the expectedPods of a PDB with the
    structured selector (the API server validates it; the controller-manager counts it)."""
    c, ns = cluster, labelled_pods
    out = []
    for i, (selector, _) in enumerate(VALID):
        names = _kubectl_names(c, ns, to_query(selector))
        assert _apply(c, _pdb(f"sel-{i}", ns, selector)).returncode == 0
        out.append((names, -1))
    for i in range(len(VALID)):
        pdb = h.poll(
            lambda i=i: (
                (h.get_json(c, "get", "pdb", "-n", ns, f"sel-{i}") or {}).get("status") or {}
            ).get("observedGeneration"),
            60,
            f"PDB sel-{i} observed",
        )
        assert pdb
        expected = h.get_json(c, "get", "pdb", "-n", ns, f"sel-{i}")["status"]["expectedPods"]
        out[i] = (out[i][0], expected)
    return out


@pytest.mark.parametrize(("selector", "expected"), VALID, ids=[str(i) for i in range(len(VALID))])
def test_selectors_select_what_kubectl_and_the_api_server_select(
    cluster: Cluster, strict, labelled_pods: str, oracles, selector: dict, expected: set[str]
):
    c, ns = cluster, labelled_pods
    i = VALID.index((selector, expected))
    kubectl_names, pdb_count = oracles[i]
    assert kubectl_names == expected, to_query(selector)  # kubectl get pods -l <query>
    assert pdb_count == len(expected)  # the API server's own evaluation of the selector

    name = f"sel-{i}"
    doc = yaml.safe_load(h.session_yaml(name, ns, "x", "10m"))
    doc["spec"]["target"]["podSelector"] = selector
    assert _apply(c, doc).returncode == 0
    # Agent pods of the earlier cases now live here too; they are never targets.
    h.poll(
        lambda: _status(c, ns, name).get("pods") == len(expected),
        60,
        f"session {name} resolved {len(expected)} pods",
    )
    assert _status(c, ns, name)["phase"] == "Running"
    h.delete_session(c, ns, name)


@pytest.mark.parametrize(("selector", "field"), INVALID, ids=[str(i) for i in range(len(INVALID))])
def test_invalid_selectors_are_refused_as_the_api_server_refuses_them(
    cluster: Cluster, selector: dict, field: str
):
    c, ns = cluster, NS["sel"]
    r = _apply(c, _pdb("bad", ns, selector))  # the API server's own validation
    assert r.returncode != 0 and f"spec.selector.{field}" in r.stderr, r.stderr
    doc = yaml.safe_load(h.session_yaml("bad-sel", ns, "x", "10m"))
    doc["spec"]["target"]["podSelector"] = selector
    r = _apply(c, doc)
    assert r.returncode != 0 and f"spec.target.podSelector.{field}" in r.stderr, r.stderr


def _lenient_crd() -> str:
    """The CRD without its label key/value checks, as an older CRD would have been."""
    crd = yaml.safe_load(h.CRD.read_text())
    sel = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["target"]["properties"]["podSelector"]["properties"]
    sel["matchLabels"].pop("x-kubernetes-validations")
    sel["matchLabels"]["additionalProperties"].pop("pattern")
    sel["matchExpressions"]["items"]["properties"]["key"].pop("pattern")
    return yaml.safe_dump(crd)


def test_a_stored_bad_selector_fails_the_session_instead_of_looping(cluster: Cluster, strict):
    c, ns = cluster, NS["sel"]
    bad = {
        "space-exists": {"matchExpressions": [{"key": " ", "operator": "Exists"}]},
        "empty-key": {"matchLabels": {"": "a"}},
    }
    c.kubectl("apply", "-f", "-", stdin=_lenient_crd())
    try:
        time.sleep(2)
        for name, selector in bad.items():
            doc = yaml.safe_load(h.session_yaml(name, ns, "x", "10m"))
            doc["spec"]["target"]["podSelector"] = copy.deepcopy(selector)
            r = _apply(c, doc)
            assert r.returncode == 0, r.stderr
    finally:
        h.apply_crd(c)
    for name in bad:
        h.poll(lambda n=name: _status(c, ns, n).get("phase") == "Failed", 30, f"{name} Failed")
        st = _status(c, ns, name)
        assert st["reason"] == "InvalidSpec" and "spec.target.podSelector." in st["message"], st
        assert not h.get_json(c, "get", "ds", "-n", ns, f"kubeprof-{name}-agent")
    log = strict.proc.text()
    assert "HTTP 400" not in log, log[-2000:]  # the selector never reached the API server
    for name in bad:
        h.delete_session(c, ns, name)


def test_session_names_the_operator_cannot_store_are_refused(
    cluster: Cluster, strict, postgres_dsn
):
    """181 characters: refused by the API server naming metadata.name; 180: stored."""
    import psycopg

    c, ns = cluster, NS["att"]
    too_long, longest = "n" * 181, "n" * 180
    r = c.kubectl("apply", "-f", "-", stdin=h.session_yaml(too_long, ns, "x", "10m"), check=False)
    assert r.returncode != 0 and "metadata.name must be at most 180 characters" in r.stderr, (
        r.stderr
    )
    c.kubectl("apply", "-f", "-", stdin=h.session_yaml(longest, ns, "x", "10m"))
    store = h.poll(
        lambda: _status(c, ns, longest).get("storeSession"), 30, "the longest name stored"
    )
    assert len(store) <= 253 and store.startswith(f"{ns}/{longest}@")
    with psycopg.connect(postgres_dsn.libpq) as conn:
        assert (
            conn.execute("SELECT count(*) FROM sessions WHERE name = %s", (store,)).fetchone()[0]
            == 1
        )
    h.delete_session(c, ns, longest)
