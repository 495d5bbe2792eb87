"""The light agent says what is wrong on stderr in one line, as every entry point does."""

from __future__ import annotations

import socket

from kubeprof.agent.light.main import main


def _replay(tmp_path):
    replay = tmp_path / "r.jsonl"
    replay.write_text('{"devices": []}\n')
    return replay


def test_missing_node_name_is_one_line_on_stderr(capsys, monkeypatch):
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main([]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == "kubeprof agent --light: error: --node-name (env NODE_NAME) is required\n"


def test_a_variable_that_does_not_parse_is_named(capsys, monkeypatch):
    monkeypatch.setenv("KUBEPROF_LIGHT_WINDOW_S", "a minute")
    assert main(["--node-name", "n"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith("kubeprof agent --light: error: KUBEPROF_LIGHT_WINDOW_S='a minute'")


def test_a_taken_port_is_one_line_naming_listen(tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc = main(
            [
                "--node-name",
                "n",
                "--replay",
                str(_replay(tmp_path)),
                "--listen",
                f"127.0.0.1:{port}",
            ]
        )
    out = capsys.readouterr()
    assert rc == 2 and out.out == ""
    assert out.err.startswith(f"kubeprof agent --light: error: --listen 127.0.0.1:{port}: ")
    assert "Traceback" not in out.err and out.err.count("\n") == 1
