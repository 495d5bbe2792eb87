"""The agent's settings survive the trip operator -> DaemonSet env -> agent."""

from pathlib import Path

import pytest

from kubeprof.protocol.settings import DEFAULT_CPU_HZ, AgentSettings


def _as_pod_sees_it(env: list[dict], node: str) -> dict[str, str]:
    """The environment a pod gets from `env` (the kubelet resolves NODE_NAME)."""
    out = {}
    for e in env:
        if "value" in e:
            out[e["name"]] = e["value"]
        else:
            assert e["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
            out[e["name"]] = node
    return out


@pytest.mark.parametrize(
    "settings",
    [
        AgentSettings(),
        AgentSettings(
            node_name="gpu-7",
            ingest_url="http://op:8080",
            namespace="ml",
            session="train",
            token_file=Path("/t/token"),
            spool_dir=Path("/s"),
            spool_max_mb=7,
            proc_root=Path("/host/proc"),
            collectors=("cpu", "nvml"),
            cpu_hz=49,
            nvml_interval_s=0.25,
            poll_interval_s=2.5,
            rescan_interval_s=0.5,
            end_time=1700000000.5,
            drain_timeout_s=3.0,
            gpu_socket="/run/kubeprof/rx/u-1.sock",
            gpu_ctl_dir="/c",
            log_level="DEBUG",
        ),
    ],
)
def test_to_env_then_from_env_is_the_same_object(settings):
    environ = _as_pod_sees_it(settings.to_env(), settings.node_name)
    assert AgentSettings.from_env(environ) == settings


def test_every_field_is_written_once_and_node_name_comes_from_the_downward_api():
    env = AgentSettings(node_name="ignored", gpu_socket="/s", gpu_ctl_dir="/c").to_env()
    names = [e["name"] for e in env]
    assert len(names) == len(set(names)) == len(AgentSettings.__dataclass_fields__)
    # The GPU receiver's variables are written only when the operator switches it on.
    off = {e["name"] for e in AgentSettings().to_env()}
    assert set(names) - off == {"KUBEPROF_AGENT_GPU_SOCKET", "KUBEPROF_AGENT_GPU_CTL_DIR"}
    node = next(e for e in env if e["name"] == "NODE_NAME")
    assert node == {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


def test_values_as_the_agent_reads_them():
    env = {e["name"]: e.get("value") for e in AgentSettings(nvml_interval_s=1.0).to_env()}
    assert env["KUBEPROF_NVML_INTERVAL_S"] == "1"  # what the DaemonSet always carried
    assert env["KUBEPROF_CPU_HZ"] == str(DEFAULT_CPU_HZ) == "99"
    assert env["KUBEPROF_SESSION_END"] == "0"  # no end time known


def test_unset_variables_keep_defaults_and_bad_ones_are_named():
    assert AgentSettings.from_env({}) == AgentSettings()
    assert AgentSettings.from_env({"KUBEPROF_SESSION_END": "0"}).end_time is None
    assert AgentSettings.from_env({"KUBEPROF_COLLECTORS": " cpu, ,nvml"}).collectors == (
        "cpu",
        "nvml",
    )
    with pytest.raises(ValueError, match="KUBEPROF_CPU_HZ"):
        AgentSettings.from_env({"KUBEPROF_CPU_HZ": "fast"})


def test_agent_flags_default_to_the_environment():
    from kubeprof.agent.cluster.main import build_parser

    args = build_parser(
        {"KUBEPROF_CPU_HZ": "49", "NODE_NAME": "n1", "KUBEPROF_SESSION_END": "12.5"}
    ).parse_args([])
    assert (args.hz, args.node_name, args.end_time) == (49, "n1", 12.5)
    defaults = build_parser({}).parse_args([])
    assert (defaults.hz, defaults.end_time, defaults.collectors) == (DEFAULT_CPU_HZ, None, "cpu")


def test_flags_replace_the_fields_they_name_and_nothing_else():
    from kubeprof.agent.cluster.main import _settings, build_parser

    flags = {"hz": 49, "spool_dir": Path("/s"), "listen": "0.0.0.0:1"}
    s = AgentSettings().with_flags(flags, {"hz": "cpu_hz"})
    assert s == AgentSettings(cpu_hz=49, spool_dir=Path("/s"))
    args = build_parser({}).parse_args(["--hz", "7", "--collectors", "cpu, nvml", "--pod-uid", "u"])
    assert _settings(args) == AgentSettings(cpu_hz=7, collectors=("cpu", "nvml"))
