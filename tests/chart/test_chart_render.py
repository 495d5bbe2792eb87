"""charts/kubeprof rendered by the pinned helm: lint, schema, RBAC, security, agent settings."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeprof.operator import metrics
from kubeprof.operator.build import build_daemonset
from kubeprof.operator.main import build_config, build_parser
from kubeprof.operator.spec import parse
from tests.support import chart

pytestmark = pytest.mark.usefixtures("helm_built")

CUSTOM: dict[str, Any] = {
    "fullnameOverride": "prof",
    "operator": {
        "watchNamespaces": ["ml", "research"],
        "image": {"tag": "1.2.3"},
        "reconcileIntervalSeconds": 2,
        "verbose": True,
    },
    "agent": {
        "image": {"repository": "reg.example/kp-agent", "tag": "9"},
        "cpu": "1",
        "memory": "1Gi",
        "priorityClassName": "system-node-critical",
        "spoolHostPath": "/data/kubeprof",
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
        ],
        "securityContext": {
            "privileged": False,
            "runAsUser": 0,
            "capabilities": {"drop": ["ALL"], "add": ["BPF", "PERFMON"]},
        },
    },
    "postgresql": {"enabled": False},
    "externalDatabase": {"existingSecret": "pg-dsn", "urlKey": "url"},
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
    "prometheusRule": {"enabled": True, "gpuIdle": {"threshold": 0.8, "for": "2m"}},
    "grafana": {"dashboard": {"enabled": True}},
}


def _env(deploy: dict[str, Any]) -> dict[str, Any]:
    c = deploy["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def test_helm_pin_matches_build_script():
    assert f"HELM_VERSION={chart.HELM_VERSION}\n" in chart.BUILD_SCRIPT.read_text()
    assert chart.helm("version", "--short").stdout.startswith(chart.HELM_VERSION)


@pytest.mark.parametrize("values", [{}, CUSTOM], ids=["default", "custom"])
def test_lint(values, tmp_path: Path):
    f = tmp_path / "values.yaml"
    f.write_text(yaml.safe_dump(values))
    r = chart.helm("lint", "--strict", str(chart.CHART), "--values", str(f))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in r.stdout


@pytest.mark.parametrize(
    "values,path",
    [
        ({"operator": {"watchNamespace": ["ml"]}}, "'watchNamespace' not allowed"),
        ({"agnet": {}}, "'agnet' not allowed"),
        ({"prometheusRule": {"gpuIdle": {"threshold": 50}}}, "/prometheusRule/gpuIdle/threshold"),
        ({"prometheusRule": {"gpuIdle": {"for": "10 minutes"}}}, "/prometheusRule/gpuIdle/for"),
        ({"operator": {"replicas": 2}}, "/operator/replicas"),
        ({"agent": {"spoolHostPath": "relative/dir"}}, "/agent/spoolHostPath"),
    ],
)
def test_a_typo_or_bad_value_fails_the_schema(values, path):
    with pytest.raises(chart.RenderError) as err:
        chart.render(values)
    assert "values don't meet the specifications of the schema" in str(err.value)
    assert path in str(err.value)


def test_external_database_needs_its_secret():
    with pytest.raises(chart.RenderError, match=r"externalDatabase\.existingSecret is required"):
        chart.render({"postgresql": {"enabled": False}})


def test_default_objects_and_operator_pod_hardening():
    docs = chart.render()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "ClusterRole",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterRoleBinding",
        "Deployment",
        "Secret",
        "Service",
        "Service",
        "ServiceAccount",
        "StatefulSet",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    deploy = chart.find(docs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "kp-kubeprof"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = pod["containers"][0]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    env = _env(deploy)
    assert env["KUBEPROF_DATABASE_URL"] == {
        "secretKeyRef": {"name": "kp-kubeprof-postgresql", "key": "database-url"}
    }
    assert env["KUBEPROF_INGEST_URL"] == "http://kp-kubeprof.kubeprof-system.svc:8080"
    assert env["KUBEPROF_WATCH_NAMESPACES"] == ""
    svc = chart.find(docs, "Service", "kp-kubeprof")
    assert (
        svc["spec"]["selector"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    )


def test_bundled_postgres_password_is_generated_and_in_the_url():
    docs = chart.render()
    sec = chart.find(docs, "Secret", "kp-kubeprof-postgresql")
    pw = base64.b64decode(sec["data"]["password"]).decode()
    url = base64.b64decode(sec["data"]["database-url"]).decode()
    assert len(pw) == 32 and pw.isalnum()
    assert url == (
        f"postgresql+psycopg://kubeprof:{pw}@kp-kubeprof-postgresql"
        ".kubeprof-system.svc:5432/kubeprof"
    )
    assert sec["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    other = base64.b64decode(chart.find(chart.render(), "Secret")["data"]["password"])
    assert other.decode() != pw, "each fresh install draws its own password"
    sts = chart.find(docs, "StatefulSet")
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"] == {
        "storage": "20Gi"
    }
    pg = sts["spec"]["template"]["spec"]["containers"][0]
    assert {
        "name": "POSTGRES_PASSWORD",
        "valueFrom": {"secretKeyRef": {"name": "kp-kubeprof-postgresql", "key": "password"}},
    } in pg["env"]


# The operator's API calls (operator/kubeprof/operator/kube.py, kopf's watch and patches):
# any widening of these rules must be a deliberate change of this table.
SESSION_RULES = [
    {
        "apiGroups": ["kubeprof.dev"],
        "resources": ["profilingsessions"],
        "verbs": ["get", "list", "watch", "patch"],
    },
    {"apiGroups": ["kubeprof.dev"], "resources": ["profilingsessions/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "delete"]},
    {
        "apiGroups": ["apps"],
        "resources": ["daemonsets"],
        "verbs": ["get", "list", "create", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "list"]},
]
CLUSTER_RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["list", "watch"],
    },
    # agent.auth=serviceaccount (the default): the ingest reviews agents' tokens.
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
]


def test_session_token_auth_takes_the_tokenreview_right_away():
    docs = chart.render({"agent": {"auth": "session-token"}})
    cluster = chart.find(docs, "ClusterRole", "kp-kubeprof-cluster")["rules"]
    assert cluster == CLUSTER_RULES[:-1]
    assert _env(chart.find(docs, "Deployment"))["KUBEPROF_AGENT_AUTH"] == "session-token"
    default = chart.find(chart.render(), "Deployment")
    assert _env(default)["KUBEPROF_AGENT_AUTH"] == "serviceaccount"


def test_rbac_is_exactly_the_calls_the_operator_makes():
    docs = chart.render()
    roles = {d["metadata"]["name"]: d["rules"] for d in docs if d["kind"] == "ClusterRole"}
    assert roles == {"kp-kubeprof-sessions": SESSION_RULES, "kp-kubeprof-cluster": CLUSTER_RULES}
    text = json.dumps(roles)
    assert '"*"' not in text and "list" not in json.dumps(SESSION_RULES[3])
    subjects = {
        d["metadata"]["name"]: d["subjects"] for d in docs if d["kind"] == "ClusterRoleBinding"
    }
    want = [{"kind": "ServiceAccount", "name": "kp-kubeprof", "namespace": "kubeprof-system"}]
    assert subjects == {"kp-kubeprof-sessions": want, "kp-kubeprof-cluster": want}


LIGHT_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]


@pytest.mark.parametrize("deep", [False, True], ids=["light", "light-deep"])
def test_rbac_with_the_light_agent_is_exactly_its_calls_and_deep_adds_none(deep):
    """Going deep is pulled over the ingest port with a shared token: no API rights for it,
    neither the operator's nor the light agent's."""
    docs = chart.render({"lightAgent": {"enabled": True, "deep": deep}})
    roles = {d["metadata"]["name"]: d["rules"] for d in docs if d["kind"] == "ClusterRole"}
    assert roles == {
        "kp-kubeprof-sessions": [SESSION_RULES[0], *chart.POLICY_RULES, *SESSION_RULES[1:]],
        "kp-kubeprof-cluster": CLUSTER_RULES,
        "kp-kubeprof-light": LIGHT_RULES,
    }
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding")]


def test_watched_namespaces_get_role_bindings_only():
    docs = chart.render(CUSTOM)
    bindings = [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    got = sorted(
        (d["kind"], d["metadata"].get("namespace", ""), d["roleRef"]["name"]) for d in bindings
    )
    assert got == [
        ("ClusterRoleBinding", "", "prof-cluster"),
        ("RoleBinding", "ml", "prof-sessions"),
        ("RoleBinding", "research", "prof-sessions"),
    ]
    cluster = chart.find(docs, "ClusterRole", "prof-cluster")["rules"]
    assert {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]} in cluster
    assert _env(chart.find(docs, "Deployment"))["KUBEPROF_WATCH_NAMESPACES"] == "ml,research"


def test_external_database_and_monitoring_objects():
    docs = chart.render(CUSTOM)
    assert not [d for d in docs if d["kind"] in ("StatefulSet", "Secret")]
    env = _env(chart.find(docs, "Deployment"))
    assert env["KUBEPROF_DATABASE_URL"] == {"secretKeyRef": {"name": "pg-dsn", "key": "url"}}
    sm = chart.find(docs, "ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["endpoints"][0]["honorLabels"] is True
    assert (
        sm["spec"]["selector"]["matchLabels"].items()
        <= chart.find(docs, "Service")["metadata"]["labels"].items()
    )
    rule = chart.find(docs, "PrometheusRule")["spec"]["groups"][0]["rules"][0]
    assert rule["expr"].endswith("> 0.8") and rule["for"] == "2m"


def test_agent_values_reach_the_agent_daemonset(monkeypatch):
    """values -> the operator's env -> its flags -> the DaemonSet it would create."""
    deploy = chart.find(chart.render(CUSTOM), "Deployment")
    for name, value in _env(deploy).items():
        if isinstance(value, str):
            monkeypatch.setenv(name, value)
    config = build_config(build_parser().parse_args(["--database-url", "sqlite://"]))
    session = {
        "metadata": {"name": "s", "namespace": "ml", "uid": "u"},
        "spec": {
            "target": {"namespace": "ml", "podSelector": {"matchLabels": {"app": "t"}}},
            "duration": "1m",
        },
    }
    pod = build_daemonset(session, parse(session["spec"]), ["n1"], config, 0.0)["spec"]["template"][
        "spec"
    ]
    c = pod["containers"][0]
    assert c["image"] == "reg.example/kp-agent:9"
    assert c["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    assert c["securityContext"] == CUSTOM["agent"]["securityContext"]
    assert pod["tolerations"] == CUSTOM["agent"]["tolerations"]
    assert pod["priorityClassName"] == "system-node-critical"
    spool = next(v for v in pod["volumes"] if v["name"] == "spool")
    # Each session spools in its own folder under the configured root, keyed by its UID too
    # (a session re-created under the same name never receives the old one's batches).
    assert spool["hostPath"]["path"] == "/data/kubeprof/ml_s_u"
    assert config.reconcile_interval_s == 2.0 and config.namespaces == ("ml", "research")


def test_webhook_socket_folder_reaches_kernel_tracing_agents(monkeypatch):
    """webhook.socketHostPath -> the operator's env -> its flags -> the DaemonSet of a
    kernelTracing session: the node's rx/ folder (the one injected pods mount read-only)
    and the session's own receiver socket there; without the webhook, neither."""
    values = {"webhook": {"enabled": True, "caBundle": "Q0E=", "socketHostPath": "/srv/kp"}}
    session = {
        "metadata": {"name": "s", "namespace": "ml", "uid": "0b5e"},
        "spec": {
            "target": {"namespace": "ml", "podSelector": {"matchLabels": {"app": "t"}}},
            "duration": "1m",
            "profilers": {"gpu": {"kernelTracing": True}},
        },
    }
    got = {}
    for name, vals in (("on", values), ("off", {})):
        with monkeypatch.context() as m:
            for k, v in _env(chart.find(chart.render(vals), "Deployment")).items():
                if isinstance(v, str):
                    m.setenv(k, v)
            config = build_config(build_parser().parse_args(["--database-url", "sqlite://"]))
        got[name] = build_daemonset(session, parse(session["spec"]), ["n1"], config, 0.0)["spec"][
            "template"
        ]["spec"]
    vols = {v["name"]: v for v in got["on"]["volumes"]}
    assert vols["gpu-rx"]["hostPath"] == {"path": "/srv/kp/rx", "type": "DirectoryOrCreate"}
    env = {e["name"]: e.get("value") for e in got["on"]["containers"][0]["env"]}
    assert env["KUBEPROF_AGENT_GPU_SOCKET"] == "/run/kubeprof/rx/0b5e.sock"
    assert env["KUBEPROF_AGENT_GPU_CTL_DIR"] == "/run/kubeprof/ctl"
    assert "gpu-rx" not in {v["name"] for v in got["off"]["volumes"]}
    assert "KUBEPROF_AGENT_GPU_SOCKET" not in {
        e["name"] for e in got["off"]["containers"][0]["env"]
    }


def test_default_agent_values_keep_the_built_in_security_context(monkeypatch):
    deploy = chart.find(chart.render(), "Deployment")
    env = _env(deploy)
    assert env["KUBEPROF_AGENT_SECURITY_CONTEXT"] == ""
    assert json.loads(env["KUBEPROF_AGENT_TOLERATIONS"]) == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    for name, value in env.items():
        if isinstance(value, str):
            monkeypatch.setenv(name, value)
    config = build_config(build_parser().parse_args(["--database-url", "sqlite://"]))
    assert config.agent_security_context is None and config.agent_priority_class == ""


def test_chart_crd_is_the_repository_crd():
    assert (chart.CHART / "crds" / "profilingsession.yaml").read_text() == (
        chart.ROOT / "crds" / "profilingsession.yaml"
    ).read_text()


def test_chart_admission_policy_is_the_repository_policy():
    policy = chart.ROOT / "crds" / "profilingsession-admission.yaml"
    want = list(yaml.safe_load_all(policy.read_text()))
    docs = chart.render()
    got = [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]
    assert got == want
    off = chart.render({"admissionPolicy": {"create": False}})
    assert not [d for d in off if d["kind"].startswith("ValidatingAdmissionPolicy")]


def test_cross_namespace_values_reach_the_operator_and_its_rbac():
    docs = chart.render(
        {
            "operator": {"allowCrossNamespace": True, "uiAccess": "off"},
            "agent": {"seccomp": "Unconfined"},
        }
    )
    env = {
        e["name"]: e.get("value")
        for d in docs
        if d["kind"] == "Deployment"
        for e in d["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["KUBEPROF_ALLOW_CROSS_NAMESPACE"] == "1"
    assert env["KUBEPROF_AGENT_SECCOMP"] == "Unconfined"
    assert env["KUBEPROF_UI_ACCESS"] == "off"
    rules = next(d["rules"] for d in docs if d["metadata"]["name"] == "kp-kubeprof-cluster")
    assert {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["validatingadmissionpolicies", "validatingadmissionpolicybindings"],
        "resourceNames": ["kubeprof-target-namespace"],
        "verbs": ["get"],
    } in rules


def test_cross_namespace_with_watched_namespaces_may_list_pods_in_any_namespace():
    """A cross-namespace session's target namespace need not be watched: with
    watchNamespaces set, only the cluster role can let the operator list its pods."""
    pods = {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}

    def cluster_rules(operator: dict) -> list:
        docs = chart.render({"operator": operator})
        return next(d["rules"] for d in docs if d["metadata"]["name"] == "kp-kubeprof-cluster")

    assert pods in cluster_rules({"allowCrossNamespace": True, "watchNamespaces": ["team"]})
    # not otherwise: cluster-wide the sessions role already binds everywhere
    assert pods not in cluster_rules({"allowCrossNamespace": True})
    assert pods not in cluster_rules({"watchNamespaces": ["team"]})


def test_dashboard_configmap_for_the_sidecar_uses_real_metrics():
    cm = chart.find(chart.render(CUSTOM), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dash = json.loads(cm["data"]["kubeprof.json"])
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\b(kubeprof_[a-z_]+)", e)}
    exported = {m.name for m in metrics.REGISTRY.collect()}
    exported |= {n + "_total" for n in exported}
    assert used <= exported, used - exported
    assert {
        "kubeprof_gpu_idle_ratio",
        "kubeprof_sessions",
        "kubeprof_findings",
        "kubeprof_ingest_rejections_total",
        "kubeprof_ingest_batches_total",
    } <= used
    titles = {p["title"] for p in dash["panels"]}
    assert {
        "GPU idle by workload (pod)",
        "GPU idle by node and GPU",
        "Sessions by phase",
        "Ingest rate",
        "Top findings",
    } <= titles


def test_every_value_is_commented():
    lines = (chart.CHART / "values.yaml").read_text().splitlines()
    missing = []
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)([A-Za-z][\w.-]*):(.*)$", line)
        # Entries inside a commented free-form value (a map or list) need no comment each.
        if not m or {"resources", "labels", "tolerations"} & set(_parents(lines, i)):
            continue
        block_parent = m.group(3).strip() == "" and not lines[i + 1].lstrip().startswith("-")
        prev = lines[i - 1].strip() if i else ""
        if not block_parent and not prev.startswith("#"):
            missing.append(line.strip())
    assert not missing, f"values without a comment: {missing}"


def _parents(lines: list[str], i: int) -> list[str]:
    indent = len(lines[i]) - len(lines[i].lstrip())
    out = []
    for line in reversed(lines[:i]):
        ind = len(line) - len(line.lstrip())
        if line.strip() and not line.lstrip().startswith("#") and ind < indent:
            out.append(line.strip().lstrip("- ").split(":")[0])
            indent = ind
    return out
