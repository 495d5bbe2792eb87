"""The chart's switchable light agent: off by default; on, least-privilege and wired up."""

from __future__ import annotations

from tests.support import chart


def _env(docs: list[dict]) -> dict[str, str]:
    dep = chart.find(docs, "Deployment", "kp-kubeprof")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in c["env"]}


def test_off_by_default(helm_built) -> None:
    docs = chart.render()
    assert not [d for d in docs if d["metadata"]["name"].endswith("-light")]
    assert "KUBEPROF_LIGHT_AGENTS" not in _env(docs)
    sessions = chart.find(docs, "ClusterRole", "kp-kubeprof-sessions")["rules"]
    assert not [r for r in sessions if r in chart.POLICY_RULES]


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
        "http://kp-kubeprof-light.kubeprof-system.svc:9400/metrics"
    )
    sessions = chart.find(docs, "ClusterRole", "kp-kubeprof-sessions")["rules"]
    assert [r for r in sessions if r in chart.POLICY_RULES] == chart.POLICY_RULES


def test_service_monitor_scrapes_light_agents_when_both_enabled(helm_built) -> None:
    docs = chart.render(
        {"lightAgent": {"enabled": True}, "metrics": {"serviceMonitor": {"enabled": True}}}
    )
    sm = chart.find(docs, "ServiceMonitor", "kp-kubeprof-light")
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert sm["spec"]["endpoints"][0]["honorLabels"] is True
    sel = sm["spec"]["selector"]["matchLabels"]
    svc = chart.find(docs, "Service", "kp-kubeprof-light")
    assert sel == {k: svc["metadata"]["labels"][k] for k in sel}


def _light_container(docs: list[dict]) -> tuple[dict, dict]:
    pod = chart.find(docs, "DaemonSet", "kp-kubeprof-light")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    return pod, c


def test_deep_is_off_by_default_and_the_light_agent_keeps_no_capability(helm_built) -> None:
    docs = chart.render({"lightAgent": {"enabled": True}})
    pod, c = _light_container(docs)
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "runAsUser" not in c["securityContext"] and "volumes" not in pod
    env = {e["name"] for e in c["env"]}
    assert not env & {"KUBEPROF_LIGHT_DEEP", "KUBEPROF_LIGHT_TOKEN_FILE", "KUBEPROF_INGEST_URL"}
    assert not [d for d in docs if d["metadata"]["name"] == "kp-kubeprof-light-token"]
    assert "KUBEPROF_LIGHT_TOKEN_FILE" not in _env(docs)


def test_deep_grants_the_session_agents_caps_and_wires_one_token_to_both(helm_built) -> None:
    # agent.auth session-token: one shared token for the light agents and the operator.
    docs = chart.render(
        {"lightAgent": {"enabled": True, "deep": True}, "agent": {"auth": "session-token"}}
    )
    pod, c = _light_container(docs)
    sc = c["securityContext"]
    assert sc["capabilities"] == {"add": ["BPF", "PERFMON", "SYS_PTRACE"], "drop": ["ALL"]}
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True and sc["runAsUser"] == 0
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["KUBEPROF_LIGHT_DEEP"] == "1"
    assert env["KUBEPROF_INGEST_URL"] == _env(docs)["KUBEPROF_INGEST_URL"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert env["KUBEPROF_LIGHT_TOKEN_FILE"] == mounts["light-token"] + "/token"
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host["spool"] == "/var/lib/kubeprof/spool"  # agent.spoolHostPath: shared spool
    assert mounts["spool"] == env["KUBEPROF_SPOOL_DIR"]
    secret = chart.find(docs, "Secret", "kp-kubeprof-light-token")
    assert len(secret["data"]["token"]) > 40
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["light-token"]["secret"]["secretName"] == "kp-kubeprof-light-token"
    dep = chart.find(docs, "Deployment", "kp-kubeprof")["spec"]["template"]["spec"]
    op_vols = {v["name"]: v for v in dep["volumes"]}
    assert op_vols["light-token"]["secret"]["secretName"] == "kp-kubeprof-light-token"
    op_mounts = {m["name"]: m["mountPath"] for m in dep["containers"][0]["volumeMounts"]}
    assert _env(docs)["KUBEPROF_LIGHT_TOKEN_FILE"] == op_mounts["light-token"] + "/token"


def test_deep_under_serviceaccount_auth_mounts_each_pods_own_token_and_no_shared_one(
    helm_built,
) -> None:
    docs = chart.render({"lightAgent": {"enabled": True, "deep": True}})  # agent.auth default
    pod, c = _light_container(docs)
    env = {e["name"]: e.get("value") for e in c["env"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert env["KUBEPROF_LIGHT_TOKEN_FILE"] == mounts["light-token"] + "/token"
    vols = {v["name"]: v for v in pod["volumes"]}
    (source,) = vols["light-token"]["projected"]["sources"]
    assert source["serviceAccountToken"] == {
        "audience": "kubeprof.dev/ingest",
        "expirationSeconds": 600,
        "path": "token",
    }
    assert not [d for d in docs if d["metadata"]["name"] == "kp-kubeprof-light-token"]
    op_env = _env(docs)
    assert "KUBEPROF_LIGHT_TOKEN_FILE" not in op_env
    ds = chart.find(docs, "DaemonSet", "kp-kubeprof-light")
    assert op_env["KUBEPROF_LIGHT_DAEMONSET"] == f"{ds['metadata']['namespace']}/kp-kubeprof-light"
    assert op_env["KUBEPROF_LIGHT_SERVICE_ACCOUNT"] == pod["serviceAccountName"]
    assert ds["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == (
        "light-agent"
    )
    dep = chart.find(docs, "Deployment", "kp-kubeprof")["spec"]["template"]["spec"]
    assert "light-token" not in {v["name"] for v in dep["volumes"]}
    # Watching some namespaces only: the operator may still list the light agent pods.
    scoped = chart.render(
        {"lightAgent": {"enabled": True, "deep": True}, "operator": {"watchNamespaces": ["t"]}}
    )
    role = chart.find(scoped, "Role", "kp-kubeprof-light-pods")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    binding = chart.find(scoped, "RoleBinding", "kp-kubeprof-light-pods")
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"]
