"""The operator's agent flags (what the chart's `agent.*` values become): bad JSON is refused
at start with the flag's name and what to pass, before anything connects anywhere."""

import pytest

from kubeprof.operator import main as op_main


@pytest.mark.parametrize(
    "flag,value,message",
    [
        ("--agent-tolerations", "[{key: x}]", "--agent-tolerations is not valid JSON"),
        (
            "--agent-tolerations",
            '{"key": "x"}',
            "--agent-tolerations must be a JSON list of objects",
        ),
        ("--agent-tolerations", '["x"]', "--agent-tolerations must be a JSON list of objects"),
        ("--agent-security-context", "[]", "--agent-security-context must be a JSON object"),
    ],
)
def test_bad_agent_json_is_refused_naming_the_flag(capsys, flag, value, message):
    assert op_main.main(["--database-url", "sqlite://", flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kubeprof operator: error: ") and message in err


def test_agent_flags_from_the_environment(monkeypatch):
    monkeypatch.setenv("KUBEPROF_AGENT_TOLERATIONS", '[{"operator": "Exists"}]')
    monkeypatch.setenv("KUBEPROF_AGENT_SECURITY_CONTEXT", "")
    monkeypatch.setenv("KUBEPROF_AGENT_PRIORITY_CLASS", "gpu-agents")
    cfg = op_main.build_config(op_main.build_parser().parse_args(["--database-url", "x"]))
    assert cfg.agent_tolerations == ({"operator": "Exists"},)
    assert cfg.agent_security_context is None and cfg.agent_priority_class == "gpu-agents"


def test_unset_agent_flags_keep_the_built_in_defaults(monkeypatch):
    for name in (
        "KUBEPROF_AGENT_TOLERATIONS",
        "KUBEPROF_AGENT_SECURITY_CONTEXT",
        "KUBEPROF_AGENT_PRIORITY_CLASS",
    ):
        monkeypatch.delenv(name, raising=False)
    cfg = op_main.build_config(op_main.build_parser().parse_args(["--database-url", "x"]))
    assert cfg.agent_tolerations is None and cfg.agent_security_context is None
    assert cfg.agent_priority_class == ""
