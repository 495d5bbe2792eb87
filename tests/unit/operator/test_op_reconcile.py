"""Reconcile passes against a fake API and an SQLite store, with a fake clock."""

import copy
from datetime import UTC, datetime

import pytest

from kubeprof.model import Batch, CpuSample, Frame, FrameKind, GpuMetricSample, ProcessInfo
from kubeprof.operator import aggregate, metrics
from kubeprof.operator.config import OperatorConfig
from kubeprof.operator.db import BatchWriter
from kubeprof.operator.reconcile import Context, reconcile
from kubeprof.operator.registry import Registry
from kubeprof.storage import Store

T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


class FakeKube:
    """Just enough of the API: pods by label app, secrets and DaemonSets by name."""

    def __init__(self) -> None:
        self.pods: list[dict] = []
        self.objects: dict[str, dict] = {}
        self.deleted: list[str] = []
        self.events: list[dict] = []
        self.policy: tuple[dict | None, dict | None] = (None, None)

    def list_pods(self, namespace, selector):
        want = dict(kv.split("=", 1) for kv in selector.split(","))
        return [
            p
            for p in self.pods
            if all(p["metadata"]["labels"].get(k) == v for k, v in want.items())
        ]

    def node_labels(self):
        return {}

    def node_kernels(self):
        return {"n1": "6.1.0-18-amd64", "n2": "6.1.0-18-amd64"}

    def daemonset_events(self, namespace, name):
        return self.events

    def admission_policy(self, name):
        return self.policy

    def get_secret(self, namespace, name):
        return self.objects.get(f"secrets/{name}")

    def _create(self, kind, obj):
        key = f"{kind}/{obj['metadata']['name']}"
        if key in self.objects:
            return None
        self.objects[key] = copy.deepcopy(obj)
        return obj

    def create_secret(self, namespace, obj):
        return self._create("secrets", obj)

    def delete_secret(self, namespace, name):
        return self.objects.pop(f"secrets/{name}", None) is not None

    def create_daemonset(self, namespace, obj):
        return self._create("daemonsets", obj)

    def get_daemonset(self, namespace, name):
        return self.objects.get(f"daemonsets/{name}")

    def list_daemonsets(self, namespace, selector):
        want = dict(kv.split("=", 1) for kv in selector.split(","))
        return [
            o
            for k, o in self.objects.items()
            if k.startswith("daemonsets/") and want.items() <= o["metadata"]["labels"].items()
        ]

    def patch_daemonset(self, namespace, name, patch):
        ds = self.objects[f"daemonsets/{name}"]
        ds["spec"]["template"]["spec"]["affinity"] = patch["spec"]["template"]["spec"]["affinity"]
        return ds

    def delete_daemonset(self, namespace, name):
        self.deleted.append(name)
        return self.objects.pop(f"daemonsets/{name}", None) is not None


def _pod(name, node, uid):
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": uid, "labels": {"app": "t"}},
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


BODY = {
    "metadata": {"name": "s", "namespace": "ml", "uid": "uid-session-1", "generation": 1},
    "spec": {
        "target": {"namespace": "ml", "podSelector": {"matchLabels": {"app": "t"}}},
        "duration": "60s",
    },
}


@pytest.fixture
def env(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path}/k.db")
    kube = FakeKube()
    clock = [T0]
    cfg = OperatorConfig(database_url="", drain_s=5)
    ctx = Context(kube, store.engine, Registry(), cfg, clock=lambda: clock[0])
    yield ctx, kube, clock, store
    store.close()


def _pass(ctx, body):
    status = reconcile(ctx, body)
    body["status"] = status
    return status


def test_full_lifecycle_and_restart(env):
    ctx, kube, clock, store = env
    body = copy.deepcopy(BODY)
    st = _pass(ctx, body)
    assert st["phase"] == "Pending" and st["reason"] == "NoMatchingPods" and st["pods"] == 0
    assert "daemonsets/kubeprof-s-agent" not in kube.objects
    token = ctx.writer_registry.get("ml", "s").token

    kube.pods = [_pod("p1", "n1", "uid-p1")]
    clock[0] += 5
    st = _pass(ctx, body)
    assert (st["phase"], st["nodes"], st["pods"]) == ("Running", 1, 1)
    ds = kube.objects["daemonsets/kubeprof-s-agent"]
    assert ds["metadata"]["ownerReferences"][0]["uid"] == "uid-session-1"

    kube.pods.append(_pod("p2", "n2", "uid-p2"))
    st = _pass(ctx, body)
    terms = kube.objects["daemonsets/kubeprof-s-agent"]["spec"]["template"]["spec"]["affinity"][
        "nodeAffinity"
    ]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [t["matchFields"][0]["values"] for t in terms] == [["n1"], ["n2"]]

    entry = ctx.writer_registry.get("ml", "s")
    stack = (Frame("main", FrameKind.PYTHON, "t.py", 1), Frame("hot", FrameKind.PYTHON, "t.py", 9))
    BatchWriter(store.engine).store(
        entry.db_id,
        "b1",
        "n1",
        Batch(
            samples=tuple(CpuSample(i, 7, 7, "py", 0, stack) for i in range(30)),
            processes=(ProcessInfo(7, 1, "py", "py", "c", "uid-p1"),),
            gpu_metrics=(
                GpuMetricSample(1, 0, "gpu_util_pct", 20.0),
                GpuMetricSample(2, 0, "gpu_util_pct", 40.0),
                GpuMetricSample(2, 0, "proc_sm_util", 40.0, pid=7),
            ),
        ),
    )

    # Operator restart: a fresh registry; the next pass rebuilds it from status + DB.
    ctx.writer_registry = Registry()
    clock[0] = T0 + 61
    st = _pass(ctx, body)
    assert st["phase"] == "Aggregating" and st["reason"] == "Draining"
    assert ctx.writer_registry.get("ml", "s").token == token
    assert ctx.writer_registry.get("ml", "s").db_id == entry.db_id

    clock[0] += 6
    st = _pass(ctx, body)
    assert st["phase"] == "Completed" and st["samples"] == 30
    assert st["topStacks"] == ["30 hot (t.py:9) <- main (t.py:1)"]
    assert st["gpuIdle"] == "70%" and "GPU idle 70%" in st["topFinding"]
    assert st["summary"]["pods"][0] == {
        "name": "ml/p1",
        "samples": 30,
        "gpuIdle": "70%",
        "gpuIdleSource": "nvml",
        "topStack": "hot (t.py:9) <- main (t.py:1)",
    }
    assert "daemonsets/kubeprof-s-agent" not in kube.objects
    assert {c["type"]: c["status"] for c in st["conditions"]}["Completed"] == "True"
    exposed = metrics.render().decode()
    # the live series ended with the session (an alert on it resolves); the result stays
    assert "kubeprof_gpu_idle_ratio{" not in exposed
    assert (
        'kubeprof_pod_gpu_idle_ratio{namespace="ml",pod="p1",session="s",'
        'session_namespace="ml",source="nvml"} 0.7'
    ) in exposed
    assert st["startTime"] == "2026-01-01T00:00:00Z" and st["endTime"] == "2026-01-01T00:01:00Z"

    again = _pass(ctx, body)  # terminal: nothing changes
    assert again["phase"] == "Completed" and again["samples"] == 30


def test_no_pods_during_whole_session_fails(env):
    ctx, _kube, clock, _ = env
    body = copy.deepcopy(BODY)
    _pass(ctx, body)
    clock[0] += 61
    st = _pass(ctx, body)
    assert (st["phase"], st["reason"]) == ("Failed", "NoMatchingPods")
    assert "no pod matched" in st["topFinding"]


def test_an_aggregation_that_keeps_failing_ends_failed_and_cleans_up(env, monkeypatch):
    ctx, kube, clock, _ = env
    body = copy.deepcopy(BODY)
    kube.pods = [_pod("p1", "n1", "uid-p1")]
    _pass(ctx, body)
    assert any(k.startswith("secrets/") for k in kube.objects)

    def boom(*_a, **_k):
        raise MemoryError("cannot allocate")

    monkeypatch.setattr(aggregate, "aggregate", boom)
    clock[0] += 61
    assert _pass(ctx, body)["phase"] == "Aggregating"
    clock[0] += 6
    seen = []
    for _ in range(ctx.config.aggregation_attempts):
        st = _pass(ctx, body)
        seen.append((st["phase"], st["reason"]))
        clock[0] += 5
    assert seen[:-1] == [("Aggregating", "AggregationRetrying")] * (len(seen) - 1)
    assert seen[-1] == ("Failed", "AggregationFailed")
    assert "MemoryError: cannot allocate" in st["message"]
    cond = {c["type"]: c for c in st["conditions"]}["Completed"]
    assert (cond["status"], cond["reason"]) == ("False", "AggregationFailed")
    assert not any(k.startswith(("daemonsets/", "secrets/")) for k in kube.objects)
    assert ctx.writer_registry.get("ml", "s").closed

    # An operator restart later does not make the Secret again.
    ctx.writer_registry = Registry()
    assert _pass(ctx, body)["phase"] == "Failed"
    assert not any(k.startswith("secrets/") for k in kube.objects)


def test_aggregate_gpu_idle_from_activity_spans_when_no_metrics(env):
    ctx, _, _, store = env
    from kubeprof.model import GpuActivity

    body = copy.deepcopy(BODY)
    _pass(ctx, body)
    sid = ctx.writer_registry.get("ml", "s").db_id
    acts = (
        GpuActivity("kernel", "k", 0, 100, 0, 7, 1),
        GpuActivity("kernel", "k", 50, 150, 0, 7, 2),
        GpuActivity("kernel", "k", 300, 400, 0, 7, 3),
    )
    BatchWriter(store.engine).store(sid, "g", "n1", Batch(gpu_activities=acts))
    with store.engine.connect() as conn:
        s = aggregate.aggregate(conn, sid)
    assert [(g.node, g.device, round(g.idle, 3)) for g in s.gpus] == [("n1", 0, 0.375)]


def _session_row_meta(store, ctx):
    from kubeprof.operator import db

    with store.engine.connect() as conn:
        return db.session_meta(conn, ctx.writer_registry.get("ml", "s").db_id)


def test_carbon_is_stored_with_the_session_row(env):
    ctx, _, _, store = env
    body = copy.deepcopy(BODY)
    body["spec"]["carbon"] = {"cloudProvider": "gcp", "region": "europe-west4", "pue": 1.1}
    _pass(ctx, body)
    meta = _session_row_meta(store, ctx)
    assert meta["carbon:cloudProvider"] == "gcp" and meta["carbon:region"] == "europe-west4"
    assert meta["carbon:pue"] == "1.1" and meta["session"] == "s"


def test_no_carbon_no_carbon_meta(env):
    ctx, _, _, store = env
    _pass(ctx, copy.deepcopy(BODY))
    assert not [k for k in _session_row_meta(store, ctx) if k.startswith("carbon:")]


def test_kernel_tracing_request_gets_an_honest_condition(env):
    ctx, kube, clock, _ = env
    body = copy.deepcopy(BODY)
    body["spec"]["profilers"] = {"gpu": {"kernelTracing": True}}
    st = _pass(ctx, body)
    cond = {c["type"]: c for c in st["conditions"]}["KernelTracing"]
    assert (cond["status"], cond["reason"]) == ("False", "NotAvailable")
    assert "NVML metrics only" in cond["message"]
    kube.pods = [_pod("p1", "n1", "uid-p1")]
    clock[0] += 5
    st = _pass(ctx, body)  # still said while running, transition time kept
    again = {c["type"]: c for c in st["conditions"]}["KernelTracing"]
    assert again["lastTransitionTime"] == cond["lastTransitionTime"]
    env_ = {
        e["name"]: e.get("value")
        for e in kube.objects["daemonsets/kubeprof-s-agent"]["spec"]["template"]["spec"][
            "containers"
        ][0]["env"]
    }
    assert env_["KUBEPROF_COLLECTORS"] == "cpu,nvml"


def test_no_kernel_tracing_no_condition(env):
    ctx, _, _, _ = env
    st = _pass(ctx, copy.deepcopy(BODY))
    assert "KernelTracing" not in {c["type"] for c in st["conditions"]}


def test_kernel_tracing_with_gpu_off_says_it_is_ignored(env):
    ctx, _, _, _ = env
    body = copy.deepcopy(BODY)
    body["spec"]["profilers"] = {"gpu": {"enabled": False, "kernelTracing": True}}
    cond = {c["type"]: c for c in _pass(ctx, body)["conditions"]}["KernelTracing"]
    assert cond["status"] == "False" and "GPU profiler is disabled" in cond["message"]


def test_unparseable_spec_fails_naming_the_field(env):
    ctx, kube, _, store = env
    body = copy.deepcopy(BODY)
    body["spec"]["profilers"] = {"cpu": {"frequencyHz": 5000}}
    st = _pass(ctx, body)
    assert (st["phase"], st["reason"]) == ("Failed", "InvalidSpec")
    assert st["message"].startswith("invalid spec: spec.profilers.cpu.frequencyHz: ")
    assert {c["type"]: c["status"] for c in st["conditions"]} == {"Completed": "False"}
    assert ctx.writer_registry.get("ml", "s") is None and not kube.objects
    with store.engine.connect() as conn:
        from sqlalchemy import text

        assert conn.execute(text("SELECT count(*) FROM sessions")).scalar() == 0
    assert _pass(ctx, body)["completionTime"] == st["completionTime"]  # terminal: unchanged


def _cross(body, target="victim"):
    body = copy.deepcopy(body)
    body["spec"]["target"]["namespace"] = target
    body["metadata"]["creationTimestamp"] = "2026-01-01T00:00:10Z"
    return body


def _policy(created="2026-01-01T00:00:00Z", actions=("Deny",)):
    meta = {"name": "kubeprof-target-namespace", "creationTimestamp": created}
    return (
        {"metadata": meta, "spec": {}},
        {
            "metadata": meta,
            "spec": {"policyName": "kubeprof-target-namespace", "validationActions": list(actions)},
        },
    )


def test_cross_namespace_target_is_refused_by_default_without_touching_it(env):
    ctx, kube, _, store = env
    kube.pods = [_pod("p1", "n1", "uid-p1")]
    listed = []
    kube.list_pods = lambda ns, sel: listed.append(ns) or kube.pods
    body = _cross(BODY)
    st = _pass(ctx, body)
    assert (st["phase"], st["reason"]) == ("Failed", "CrossNamespaceNotAllowed")
    for _ in range(3):  # later passes (the timer keeps running) make nothing either
        assert _pass(ctx, body) == st
    assert "create the session in namespace 'victim'" in st["message"]
    assert "--allow-cross-namespace" in st["message"]
    assert listed == [] and not kube.objects  # no pod listed there, no Secret, no DaemonSet
    assert ctx.writer_registry.get("ml", "s") is None
    with store.engine.connect() as conn:
        from sqlalchemy import text

        assert conn.execute(text("SELECT count(*) FROM sessions")).scalar() == 0


def test_cross_namespace_when_allowed_needs_the_admission_policy_in_force(env):
    ctx, kube, _, _ = env
    ctx.config = OperatorConfig(database_url="", allow_cross_namespace=True)
    kube.pods = [_pod("p1", "n1", "uid-p1")]
    body = _cross(BODY)
    st = reconcile(ctx, body)  # policy not installed
    assert (st["phase"], st["reason"]) == ("Failed", "CrossNamespaceUnverified")
    assert "kubectl apply -f crds/profilingsession-admission.yaml" in st["message"]

    kube.policy = _policy(actions=("Warn",))
    assert "validationActions [Deny]" in reconcile(ctx, body)["message"]
    kube.policy = _policy(created="2026-01-01T00:00:09Z")  # installed after the session
    assert "created before the admission policy" in reconcile(ctx, body)["message"]

    kube.policy = _policy()
    st = _pass(ctx, body)
    assert (st["phase"], st["pods"]) == ("Running", 1)
    assert "daemonsets/kubeprof-s-agent" in kube.objects


def test_agents_forbidden_by_pod_security_are_named_in_the_status(env):
    ctx, kube, _, _ = env
    kube.pods = [_pod("p1", "n1", "uid-p1")]
    body = copy.deepcopy(BODY)
    _pass(ctx, body)
    kube.objects["daemonsets/kubeprof-s-agent"]["status"] = {
        "desiredNumberScheduled": 1,
        "currentNumberScheduled": 0,
        "numberReady": 0,
    }
    kube.events = [
        {
            "reason": "SuccessfulCreate",
            "message": "Created pod: x",
            "lastTimestamp": "2026-01-01T00:00:01Z",
        },
        {
            "reason": "FailedCreate",
            "lastTimestamp": "2026-01-01T00:00:02Z",
            "message": 'Error creating: pods "kubeprof-s-agent-abcde" is forbidden: violates '
            'PodSecurity "baseline:latest": host namespaces (hostPID=true)',
        },
    ]
    st = _pass(ctx, body)
    assert (st["phase"], st["reason"]) == ("Running", "AgentsForbiddenByPodSecurity")
    assert 'Pod Security "baseline:latest"' in st["message"]
    assert "hostPID=true" in st["message"]
    assert "pod-security.kubernetes.io/enforce=privileged" in st["message"]
    cond = {c["type"]: c for c in st["conditions"]}["AgentsReady"]
    assert cond["reason"] == "AgentsForbiddenByPodSecurity" and cond["message"].startswith("0/1")

    kube.events.append(
        {
            "reason": "FailedCreate",
            "lastTimestamp": "2026-01-01T00:00:03Z",
            "message": 'Error creating: pods "x" is forbidden: exceeded quota: '
            "q, requested: pods=1, used: pods=1, limited: pods=1",
        }
    )
    assert _pass(ctx, body)["reason"] == "AgentsForbiddenByQuota"

    kube.objects["daemonsets/kubeprof-s-agent"]["status"] = {
        "desiredNumberScheduled": 1,
        "currentNumberScheduled": 1,
        "numberReady": 1,
    }
    assert _pass(ctx, body)["reason"] == "Profiling"  # all agents up: the old events are moot


def test_a_selector_the_api_server_refuses_fails_instead_of_retrying_forever(env):
    from kubeprof.operator.kube import KubeError

    ctx, kube, _, _ = env

    def refuse(ns, sel):
        raise KubeError(400, "unable to parse requirement: invalid label key")

    kube.list_pods = refuse
    st = _pass(ctx, copy.deepcopy(BODY))
    assert (st["phase"], st["reason"]) == ("Failed", "InvalidSelector")
    assert "invalid label key" in st["message"]


def test_a_stored_selector_with_an_empty_key_fails_as_invalid_spec(env):
    ctx, _kube, _, _ = env
    body = copy.deepcopy(BODY)
    body["spec"]["target"]["podSelector"] = {"matchLabels": {"": "t"}}
    st = _pass(ctx, body)
    assert (st["phase"], st["reason"]) == ("Failed", "InvalidSpec")
    assert "spec.target.podSelector.matchLabels: Invalid value: ''" in st["message"]


def test_agent_pods_are_never_targets(env):
    """A selector like `!app` also matches the agent pods in the session's namespace."""
    ctx, kube, _, _ = env
    agent = _pod("kubeprof-s-agent-x", "n2", "uid-agent")
    agent["metadata"]["labels"].update(
        {
            "app.kubernetes.io/managed-by": "kubeprof-operator",
            "app.kubernetes.io/component": "agent",
        }
    )
    kube.pods = [_pod("p1", "n1", "uid-p1"), agent]
    st = _pass(ctx, copy.deepcopy(BODY))
    assert (st["pods"], st["nodes"]) == (1, 1)


def test_kernel_tracing_status_counts_the_pods_tracers_and_their_reasons(env):
    """With the webhook on, what the agents shipped (Batch.gpu_tracers) becomes
    .status.gpuTracers and the KernelTracing condition, the refusal in the tracer's words."""
    from dataclasses import replace

    from kubeprof.model import GpuTracerState

    ctx, kube, clock, store = env
    ctx.config = replace(ctx.config, agent_gpu_socket_host_path="/run/kubeprof")
    body = copy.deepcopy(BODY)
    body["spec"]["profilers"] = {"gpu": {"kernelTracing": True}}
    kube.pods = [_pod("p1", "n1", "uid-p1"), _pod("p2", "n2", "uid-p2")]
    st = _pass(ctx, body)
    cond = {c["type"]: c for c in st["conditions"]}["KernelTracing"]
    assert (cond["status"], cond["reason"]) == ("False", "NoTracerFound")
    assert st["gpuTracers"] == {"traced": 0, "refused": 0, "pods": []}
    env_ = {
        e["name"]: e.get("value")
        for e in kube.objects["daemonsets/kubeprof-s-agent"]["spec"]["template"]["spec"][
            "containers"
        ][0]["env"]
    }
    assert env_["KUBEPROF_AGENT_GPU_SOCKET"] == "/run/kubeprof/rx/uid-session-1.sock"

    why = "Python 3.9 is not supported (cupti-python has builds for 3.10-3.13)"
    sid = ctx.writer_registry.get("ml", "s").db_id
    w = BatchWriter(store.engine)
    w.store(
        sid,
        "t1",
        "n1",
        Batch(
            gpu_tracers=(
                GpuTracerState("uid-p1", 7, "1-a.sock", "on"),
                GpuTracerState("uid-p1", 8, "1-b.sock", "on"),
            )
        ),
    )
    w.store(
        sid,
        "t2",
        "n2",
        Batch(gpu_tracers=(GpuTracerState("uid-p2", 9, "1-c.sock", "refused", why),)),
    )
    w.store(sid, "t3", "n1", Batch(gpu_tracers=(GpuTracerState("uid-p1", 8, "1-b.sock", "off"),)))
    clock[0] += 5
    st = _pass(ctx, body)
    assert st["gpuTracers"] == {
        "traced": 2,
        "refused": 1,
        "pods": [
            {"pod": "ml/p2", "traced": 0, "refused": 1, "reasons": [why]},
            {"pod": "ml/p1", "traced": 2, "refused": 0},
        ],
    }
    cond = {c["type"]: c for c in st["conditions"]}["KernelTracing"]
    assert (cond["status"], cond["reason"]) == ("True", "PartlyTraced")
    assert cond["message"] == f"2 process(es) traced; 1 refused, e.g. ml/p2: {why}"
