"""The light agent and ProfilingPolicy on the real control plane (kube-apiserver + kwok).

kwok nodes have no GPU, so each node's light agent runs `kubeprof agent --light --replay`
with NVML readings in the API's shape (pids, timeStamp, smUtil, usedGpuMemory). They are
synthesized, not recorded: the H200 fixtures in tests/fixtures/gpu hold device-wide NVML
samples, not nvmlDeviceGetProcessUtilization. What is real: the pods (scheduled by the
real scheduler onto kwok nodes), the agent's pod lookup through the API, the cgroup
parsing (a /proc root whose <pid>/cgroup files name the pods' UIDs the way the kubelet
does), the /metrics it serves, the operator's policy timer, the ProfilingSessions it
creates and their reconciliation.

Shows: per-pod idle figures with namespace/pod/container/node/gpu labels; a policy fires
on a pod idle above its threshold for its `for` and not on a busy pod nor on a pod whose
idle flaps; the per-pod rate limit holds while the pod stays idle; the session is owned by
the policy and `kubectl get profilingsessions` names the policy; finished sessions beyond
keepFinishedSessions are deleted.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml

from kubeprof.agent.cluster.cgroups import cgroup_name
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster
from tests.e2e.cluster.ports import pick

pytestmark = pytest.mark.e2e

POLICY_CRD = h.ROOT / "crds" / "profilingpolicy.yaml"
PIDS = {"idle": 4100001, "busy": 4100002, "flappy": 4100003}


def _deployment(name: str, ns: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name, "team": "gpu"}},
                    "spec": {
                        "nodeSelector": {"nvidia.com/gpu.present": "true"},
                        "containers": [{"name": "main", "image": "registry.invalid/t:0"}],
                    },
                },
            },
        }
    )


def _readings(n: int) -> str:
    """n polls: idle pod at 5 % SM, busy at 90 %, flappy alternating 4 polls each way."""
    lines = []
    for i in range(n):
        flap = 95 if (i // 4) % 2 else 5
        samples = [
            {"pid": PIDS["idle"], "timeStamp": 1000 * (i + 1), "smUtil": 5},
            {"pid": PIDS["busy"], "timeStamp": 1000 * (i + 1), "smUtil": 90},
            {"pid": PIDS["flappy"], "timeStamp": 1000 * (i + 1), "smUtil": flap},
        ]
        procs = [{"pid": p, "usedGpuMemory": (k + 1) << 30} for k, p in enumerate(PIDS.values())]
        lines.append(
            json.dumps(
                {
                    "devices": [
                        {
                            "gpu": 0,
                            "uuid": "GPU-e2e",
                            "util_gpu": 60,
                            "mem_used": 6 << 30,
                            "mem_total": 141 << 30,
                            "processes": procs,
                            "samples": samples,
                        }
                    ]
                }
            )
        )
    return "\n".join(lines) + "\n"


def _scrape(url: str) -> dict[str, dict[str, tuple[dict, float]]]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out: dict[str, dict[str, tuple[dict, float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[s.labels.get("pod", s.labels.get("gpu", ""))] = (
                s.labels,
                s.value,
            )
    return out


def _policy_sessions(c: Cluster, ns: str, policy: str) -> list[dict]:
    got = (
        h.get_json(c, "get", "profilingsessions", "-n", ns, "-l", f"kubeprof.dev/policy={policy}")
        or {}
    )
    return got.get("items", [])


@pytest.fixture
def ns(k8s_cluster: Cluster):
    name = f"e2e-light-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("create", "namespace", name)
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_light_agent_metrics_and_policy(k8s_cluster: Cluster, postgres_dsn, ns: str):
    c = k8s_cluster
    h.apply_crd(c)
    c.kubectl("apply", "-f", str(POLICY_CRD))
    c.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/profilingpolicies.kubeprof.dev"
    )
    for app in PIDS:
        c.kubectl("apply", "-f", "-", stdin=_deployment(app, ns))
    pods = {
        app: h.poll(lambda a=app: h.running_pods(c, ns, a), 90, f"{app} pod running")[0]
        for app in PIDS
    }

    work = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-light-"))
    proc = work / "proc"
    for app, pid in PIDS.items():
        (proc / str(pid)).mkdir(parents=True)
        cid = uuid.uuid4().hex + uuid.uuid4().hex
        (proc / str(pid) / "cgroup").write_text(
            f"0::/{cgroup_name(pods[app]['metadata']['uid'], cid)}\n"
        )
    replay = work / "readings.jsonl"
    replay.write_text(_readings(64))

    nodes = sorted({p["spec"]["nodeName"] for p in pods.values()})
    agents, urls = [], {}
    try:
        for node in nodes:
            (port,) = pick(1)
            urls[node] = f"http://127.0.0.1:{port}/metrics"
            agents.append(
                h._spawn(
                    [
                        *h.KUBEPROF,
                        "agent",
                        "--light",
                        "--node-name",
                        node,
                        "--listen",
                        f"127.0.0.1:{port}",
                        "--replay",
                        str(replay),
                        "--proc-root",
                        str(proc),
                        "--interval",
                        "0.5",
                        "--window",
                        "1.5",
                        "--pods-interval",
                        "1",
                        "--kubeconfig",
                        str(c.kubeconfig),
                    ],
                    {},
                    work / f"light-{node}.log",
                )
            )

        def figures() -> dict[str, tuple[dict, float]]:
            got: dict[str, tuple[dict, float]] = {}
            for a in agents:
                assert a.alive(), a.text()[-2000:]
            for url in urls.values():
                try:
                    got.update(_scrape(url).get("kubeprof_gpu_idle_ratio", {}))
                except OSError:  # not listening yet
                    return {}
            return (
                got if {pods[a]["metadata"]["name"] for a in ("idle", "busy")} <= set(got) else {}
            )

        idle = h.poll(figures, 60, "light agents' idle figures for the pods")
        labels, value = idle[pods["idle"]["metadata"]["name"]]
        assert value == pytest.approx(0.95)
        assert labels["namespace"] == ns and labels["gpu"] == "0"
        assert labels["node"] == pods["idle"]["spec"]["nodeName"] and labels["container"]
        assert idle[pods["busy"]["metadata"]["name"]][1] == pytest.approx(0.10)
        # each pod is reported only by the agent of the node it runs on
        for node, url in urls.items():
            for lv, _ in _scrape(url).get("kubeprof_gpu_idle_ratio", {}).values():
                assert lv["node"] == node

        op = h.Operator(
            c,
            postgres_dsn.url,
            work,
            args=("--light-agents", ",".join(urls.values()), "--policy-interval", "1"),
            chart_values={"lightAgent": {"enabled": True}},  # the ProfilingPolicy rules
        ).start()
        try:
            policy = {
                "apiVersion": "kubeprof.dev/v1alpha1",
                "kind": "ProfilingPolicy",
                "metadata": {"name": "idle-gpus", "namespace": ns},
                "spec": {
                    "podSelector": {"matchLabels": {"team": "gpu"}},
                    "idleAbove": 0.5,
                    "for": "6s",
                    "profileFor": "5s",
                    "perPodPeriod": "30s",
                    "maxConcurrentSessions": 3,
                    "keepFinishedSessions": 0,
                },
            }
            c.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(policy))
            (made,) = h.poll(
                lambda: _policy_sessions(c, ns, "idle-gpus"), 60, "the policy's session"
            )
            idle_pod = pods["idle"]["metadata"]["name"]
            meta = made["metadata"]
            assert meta["annotations"]["kubeprof.dev/policy-pod"] == idle_pod
            pol = h.get_json(c, "get", "profilingpolicy", "-n", ns, "idle-gpus")
            (owner,) = meta["ownerReferences"]
            assert (owner["kind"], owner["uid"]) == ("ProfilingPolicy", pol["metadata"]["uid"])
            assert made["spec"]["target"]["podSelector"]["matchLabels"]["app"] == "idle"
            table = c.kubectl("get", "profilingsessions", "-n", ns).stdout
            assert "CREATED-BY" in table and "idle-gpus" in table, table
            # An ordinary session: the operator reconciles it like a hand-made one.
            h.poll(lambda: h.phase(c, ns, meta["name"]), 60, "the session's phase")
            # The idle pod stays idle for three more `for` periods: no second session (rate
            # limit), and none for the busy pod or the flapping one.
            time.sleep(20)
            pol = h.get_json(c, "get", "profilingpolicy", "-n", ns, "idle-gpus")
            status = pol["status"]
            assert status["held"] == {idle_pod: "rate-limited"}, status
            assert status["lastSession"] == meta["name"], status
            now = _policy_sessions(c, ns, "idle-gpus")
            assert [s["metadata"]["name"] for s in now] == [meta["name"]], now

            # Past the period the finished session is deleted (keepFinishedSessions 0) and,
            # the pod still idle, exactly one new session is made for it.
            def replaced() -> list[dict]:
                got = _policy_sessions(c, ns, "idle-gpus")
                return (
                    got if got and meta["name"] not in [s["metadata"]["name"] for s in got] else []
                )

            (second,) = h.poll(replaced, 120, "retention and the next period's session")
            assert second["metadata"]["annotations"]["kubeprof.dev/policy-pod"] == idle_pod
        finally:
            op.stop()
        print(f"\nlogs: {work}")
    finally:
        for a in agents:
            a.stop()
