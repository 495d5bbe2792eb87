"""The child objects a session owns, built without a cluster."""

import base64

import pytest

from kubeprof.operator.build import (
    build_daemonset,
    build_secret,
    child_name,
    collectors_for,
    kernel_release,
    label_value,
    spool_folder,
)
from kubeprof.operator.config import OperatorConfig
from kubeprof.operator.spec import CpuProfiler, Profilers, parse
from kubeprof.protocol.settings import AgentSettings

SESSION = {
    "apiVersion": "kubeprof.dev/v1alpha1",
    "kind": "ProfilingSession",
    "metadata": {"name": "train", "namespace": "ml", "uid": "u-1"},
    "spec": {
        "target": {"namespace": "ml", "podSelector": {"matchLabels": {"app": "t"}}},
        "duration": "5m",
        "profilers": {"cpu": {"frequencyHz": 49}, "gpu": {"enabled": False}},
    },
}
CFG = OperatorConfig(database_url="sqlite://", agent_image="img:1", ingest_url="http://op:8080")


def _ds(nodes=("n2", "n1")):
    return build_daemonset(SESSION, parse(SESSION["spec"]), list(nodes), CFG, end_time=1700000000.5)


def test_pinned_to_exactly_the_nodes():
    terms = _ds()["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]},
    ]
    with pytest.raises(ValueError):
        _ds(())


def test_owned_by_the_session_and_selectable():
    ds = _ds()
    ref = ds["metadata"]["ownerReferences"][0]
    assert ref == {
        "apiVersion": "kubeprof.dev/v1alpha1",
        "kind": "ProfilingSession",
        "name": "train",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    sel = ds["spec"]["selector"]["matchLabels"]
    assert sel.items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert ds["metadata"]["namespace"] == "ml"
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_least_privilege():
    pod = _ds()["spec"]["template"]["spec"]
    sc = pod["containers"][0]["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"add": ["BPF", "PERFMON", "SYS_PTRACE"], "drop": ["ALL"]}
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["hostPID"] is True and pod["automountServiceAccountToken"] is False
    assert "hostNetwork" not in pod and "hostIPC" not in pod
    mounts = {
        m["mountPath"]: m.get("readOnly", False) for m in pod["containers"][0]["volumeMounts"]
    }
    assert mounts == {
        "/var/run/kubeprof": True,
        "/sys/kernel/tracing": True,
        "/lib/modules": True,
        "/usr/src": True,
        "/var/lib/kubeprof/spool/ml_train_u-1": False,
        "/tmp": False,
    }
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    # No host /proc: with hostPID the container's own /proc lists the node's processes.
    assert "/proc" not in host.values()
    assert host["spool"] == "/var/lib/kubeprof/spool/ml_train_u-1"  # this session (UID) only


def test_sys_resource_only_for_kernels_that_charge_bpf_to_memlock():
    def caps(*kernels):
        ds = build_daemonset(SESSION, parse(SESSION["spec"]), ["n1"], CFG, 1.0, kernels=kernels)
        return ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"][
            "add"
        ]

    assert "SYS_RESOURCE" not in caps("6.1.0-18-amd64", "5.11.0")
    assert "SYS_RESOURCE" in caps("6.1.0", "5.10.0-28-cloud-amd64")
    assert "SYS_RESOURCE" in caps("")  # unknown kernel: stay on the safe side
    assert kernel_release("5.15.0-91-generic") == (5, 15)
    assert kernel_release("4.19.0+") == (4, 19) and kernel_release("weird") is None


def test_seccomp_is_configurable_for_old_runtimes():
    cfg = OperatorConfig(database_url="sqlite://", agent_seccomp="Unconfined")
    ds = build_daemonset(SESSION, parse(SESSION["spec"]), ["n1"], cfg, 1.0)
    sc = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert sc["seccompProfile"] == {"type": "Unconfined"}


def test_spool_folder_fits_a_file_name_for_the_longest_names():
    longest = {"metadata": {"namespace": "n" * 63, "name": "s" * 180}}
    assert len(spool_folder(longest).encode()) <= 255


def test_agent_environment():
    env = {
        e["name"]: e.get("value", e.get("valueFrom"))
        for e in _ds()["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["KUBEPROF_INGEST_URL"] == "http://op:8080"
    assert env["KUBEPROF_SESSION"] == "train" and env["KUBEPROF_SESSION_NAMESPACE"] == "ml"
    assert env["KUBEPROF_SESSION_UID"] == "u-1"  # the agent's spool is keyed by it
    assert env["KUBEPROF_CPU_HZ"] == "49" and env["KUBEPROF_COLLECTORS"] == "cpu"
    assert env["KUBEPROF_SESSION_END"] == "1700000000.500"
    assert env["KUBEPROF_TOKEN_FILE"] == "/var/run/kubeprof/token"  # a path, never the token


def test_secret_holds_token_and_is_owned():
    sec = build_secret(SESSION, "s3cret")
    assert base64.b64decode(sec["data"]["token"]) == b"s3cret"
    assert sec["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_names_stay_valid_for_long_sessions():
    long = "x" * 200
    assert len(child_name(long, "agent")) <= 55 and child_name(long, "agent").endswith("-agent")
    assert child_name(long, "agent") != child_name(long + "y", "agent")
    assert len(label_value(long)) <= 63 and label_value("short") == "short"


def test_collectors_for_profilers():
    assert collectors_for(Profilers()) == ["cpu", "nvml"]
    assert collectors_for(Profilers(cpu=CpuProfiler(enabled=False))) == ["nvml"]


def test_owner_reference_names_the_crd_even_for_a_partial_body():
    partial = {"metadata": {"name": "train", "namespace": "ml", "uid": "u-1"}}
    assert (
        build_secret(partial, "t")["metadata"]["ownerReferences"]
        == _ds()["metadata"]["ownerReferences"]
    )
    assert len(_ds()["metadata"]["ownerReferences"]) == 1


def test_agent_reads_back_what_the_daemonset_sets():
    """The DaemonSet's env, as the agent parses it, is the session's settings."""
    env = _ds()["spec"]["template"]["spec"]["containers"][0]["env"]
    s = AgentSettings.from_env({e["name"]: e["value"] for e in env if "value" in e})
    assert (s.cpu_hz, s.collectors, s.end_time, s.nvml_interval_s) == (
        49,
        ("cpu",),
        1700000000.5,
        1.0,
    )
    assert (str(s.proc_root), str(s.spool_dir)) == ("/proc", "/var/lib/kubeprof/spool")


def _gpu_ds(kernel_tracing: bool, host: str = "/run/kubeprof", uid: str = "u-1"):
    from dataclasses import replace

    body = {
        **SESSION,
        "metadata": {**SESSION["metadata"], "uid": uid},
        "spec": {**SESSION["spec"], "profilers": {"gpu": {"kernelTracing": kernel_tracing}}},
    }
    cfg = replace(CFG, agent_gpu_socket_host_path=host)
    return build_daemonset(body, parse(body["spec"]), ["n1"], cfg, end_time=1.0)


def test_kernel_tracing_session_agent_listens_in_the_webhooks_folder():
    """The agent gets the node's rx/ folder (the same one injected pods mount read-only) and
    its own receiver there, named by the session's uid; nothing else of the socket folder."""
    from kubeprof.agent.cluster.main import build_parser as agent_parser

    pod = _gpu_ds(True, "/var/run/kp/")["spec"]["template"]["spec"]
    c = pod["containers"][0]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["gpu-rx"] == {
        "name": "gpu-rx",
        "hostPath": {"path": "/var/run/kp/rx", "type": "DirectoryOrCreate"},
    }
    assert {"name": "gpu-rx", "mountPath": "/run/kubeprof/rx"} in c["volumeMounts"]
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert env["KUBEPROF_AGENT_GPU_SOCKET"] == "/run/kubeprof/rx/u-1.sock"
    assert env["KUBEPROF_AGENT_GPU_CTL_DIR"] == "/run/kubeprof/ctl"
    args = agent_parser(env).parse_args([])  # what `kubeprof agent` makes of it
    assert (args.gpu_socket, args.gpu_ctl_dir) == ("/run/kubeprof/rx/u-1.sock", "/run/kubeprof/ctl")
    # the agent's privileges are unchanged: /proc/<pid>/root needs only SYS_PTRACE (hostPID)
    assert (
        c["securityContext"]
        == _ds()["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    )
    # two sessions on one node never share a receiver
    other = _gpu_ds(True, uid="u-2")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "KUBEPROF_AGENT_GPU_SOCKET", "value": "/run/kubeprof/rx/u-2.sock"} in other


@pytest.mark.parametrize(("kernel_tracing", "host"), [(False, "/run/kubeprof"), (True, "")])
def test_no_tracer_wiring_without_kernel_tracing_or_webhook(kernel_tracing, host):
    pod = _gpu_ds(kernel_tracing, host)["spec"]["template"]["spec"]
    assert "gpu-rx" not in {v["name"] for v in pod["volumes"]}
    assert not [e for e in pod["containers"][0]["env"] if "GPU_SOCKET" in e["name"]]


def test_the_off_cpu_knobs_reach_the_agent_and_the_agent_reads_them():
    from kubeprof.protocol.settings import AgentSettings

    spec = {**SESSION["spec"], "profilers": {"cpu": {"offCpuMinMicros": 5000, "offCpuEvery": 4}}}
    ds = build_daemonset(SESSION, parse(spec), ["n1"], CFG, end_time=1700000000.5)
    env = {
        e["name"]: e["value"]
        for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]
        if "value" in e
    }
    settings = AgentSettings.from_env({**env, "NODE_NAME": "n1"})
    assert (settings.offcpu_min_us, settings.offcpu_every) == (5000, 4)
