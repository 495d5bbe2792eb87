"""The chart's switchable light agent: off by default; on, least-privilege and wired up."""

from __future__ import annotations

from tests.support import chart

POLICY_RULES = [
    {"apiGroups": ["kubeprof.dev"], "resources": ["profilingsessions"],
     "verbs": ["create", "delete"]},
    {"apiGroups": ["kubeprof.dev"], "resources": ["profilingpolicies"],
     "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["kubeprof.dev"], "resources": ["profilingpolicies/status"],
     "verbs": ["patch"]},
]


def _env(docs: list[dict]) -> dict[str, str]:
    dep = chart.find(docs, "Deployment", "kp-kubeprof")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in c["env"]}


def test_off_by_default(helm_built) -> None:
    docs = chart.render()
    assert not [d for d in docs if d["metadata"]["name"].endswith("-light")]
    assert "KUBEPROF_LIGHT_AGENTS" not in _env(docs)
    sessions = chart.find(docs, "ClusterRole", "kp-kubeprof-sessions")["rules"]
    assert not [r for r in sessions if r in POLICY_RULES]


def test_enabled_renders_daemonset_service_and_exact_rights(helm_built) -> None:
    docs = chart.render({"lightAgent": {"enabled": True}})
    ds = chart.find(docs, "DaemonSet", "kp-kubeprof-light")
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"] == ["agent", "--light"] and pod["hostPID"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    light_rules = chart.find(docs, "ClusterRole", "kp-kubeprof-light")["rules"]
    assert light_rules == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    svc = chart.find(docs, "Service", "kp-kubeprof-light")
    assert svc["spec"]["clusterIP"] == "None"
    assert _env(docs)["KUBEPROF_LIGHT_AGENTS"] == (
        "http://kp-kubeprof-light.kubeprof-system.svc:9400/metrics")
    sessions = chart.find(docs, "ClusterRole", "kp-kubeprof-sessions")["rules"]
    assert [r for r in sessions if r in POLICY_RULES] == POLICY_RULES


def test_service_monitor_scrapes_light_agents_when_both_enabled(helm_built) -> None:
    docs = chart.render({"lightAgent": {"enabled": True},
                         "metrics": {"serviceMonitor": {"enabled": True}}})
    sm = chart.find(docs, "ServiceMonitor", "kp-kubeprof-light")
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert sm["spec"]["endpoints"][0]["honorLabels"] is True
    sel = sm["spec"]["selector"]["matchLabels"]
    svc = chart.find(docs, "Service", "kp-kubeprof-light")
    assert sel == {k: svc["metadata"]["labels"][k] for k in sel}
