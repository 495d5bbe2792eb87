"""`kubeprof operator --help` and `kubeprof agent --help` explain every flag and env var."""

import pytest

from kubeprof import cli


@pytest.mark.parametrize(
    ("cmd", "words"),
    [
        (
            "operator",
            [
                "--database-url",
                "KUBEPROF_DATABASE_URL",
                "--listen",
                "--ingest-url",
                "--agent-image",
                "--reconcile-interval",
                "--drain",
                "--namespace",
                "KUBECONFIG",
            ],
        ),
        (
            "agent",
            [
                "--node-name",
                "NODE_NAME",
                "--ingest-url",
                "KUBEPROF_INGEST_URL",
                "--token-file",
                "--spool-dir",
                "--collectors",
                "--hz",
                "--end-time",
                "--drain-timeout",
                "exit status",
            ],
        ),
    ],
)
def test_help(cmd, words, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([cmd, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for w in words:
        assert w in out, w


def test_agent_refuses_missing_configuration(capsys, monkeypatch):
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert cli.main(["agent", "--ingest-url", "http://x"]) == 2
    assert "--node-name is required (or set NODE_NAME)" in capsys.readouterr().err


def test_operator_refuses_missing_database(capsys, monkeypatch):
    monkeypatch.delenv("KUBEPROF_DATABASE_URL", raising=False)
    assert cli.main(["operator"]) == 2
    assert "--database-url is required" in capsys.readouterr().err


def test_operator_ingest_limits_from_flags_and_env(capsys, monkeypatch):
    import argparse

    from kubeprof.operator import ingest_flags
    from kubeprof.protocol.limits import IngestLimits

    monkeypatch.setenv("KUBEPROF_INGEST_MAX_ROWS", "5000")
    p = argparse.ArgumentParser()
    ingest_flags.add(p)
    got = ingest_flags.limits(p.parse_args(["--ingest-max-string-chars", "300"]))
    assert got == IngestLimits(max_rows=5000, max_string_chars=300)
    monkeypatch.delenv("KUBEPROF_INGEST_MAX_ROWS")
    assert cli.main(["operator", "--database-url", "sqlite://", "--ingest-max-rows", "0"]) == 2
    assert "--ingest-max-rows must be a positive number, got 0" in capsys.readouterr().err
