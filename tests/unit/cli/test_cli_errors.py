"""Bad input to the CLI: one line naming the cause and the fix, non-zero exit."""

from __future__ import annotations

import subprocess

import pytest

from kubeprof.cli import main


def _free_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid  # just exited and reaped: no such process now


def test_unknown_pid(tmp_path, capsys):
    pid = _free_pid()
    rc = main(["record", "--store", f"sqlite:///{tmp_path}/a.db", "--pid", str(pid)])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"no process with PID {pid}" in err and "ps" in err
    assert len(err.strip().splitlines()) == 1


def test_pid_and_command_are_exclusive(tmp_path, capsys):
    rc = main(["record", "--pid", "1", "--", "true"])
    assert rc == 2 and "exactly one of --pid" in capsys.readouterr().err


@pytest.mark.parametrize("hz", ["0", "20000", "-5"])
def test_hz_out_of_range(hz, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["record", "--hz", hz, "--", "true"])
    assert exc.value.code == 2
    assert "--hz" in capsys.readouterr().err


def test_report_without_sessions_says_how_to_record(tmp_path, capsys):
    rc = main(["report", "--store", f"sqlite:///{tmp_path}/empty.db"])
    assert rc == 2 and "kubeprof record" in capsys.readouterr().err


def test_report_unknown_session_lists_recent(tmp_path, capsys):
    from kubeprof.storage import Store

    s = Store.open(f"sqlite:///{tmp_path}/x.db")
    s.create_session("alpha")
    s.close()
    rc = main(["report", "nope", "--store", f"sqlite:///{tmp_path}/x.db"])
    err = capsys.readouterr().err
    assert rc == 2 and "alpha" in err and "kubeprof sessions" in err


def test_report_gpu_view_of_a_cpu_only_session_names_the_fix(tmp_path, capsys):
    from kubeprof.model import Batch, CpuSample, Frame
    from kubeprof.storage import Store

    s = Store.open(f"sqlite:///{tmp_path}/c.db")
    sid = s.create_session("cpu-only")
    s.write_batch(sid, Batch(samples=(CpuSample(1, 1, 1, "t", 0, (Frame("main"),)),)))
    s.close()
    rc = main(
        [
            "report",
            "--store",
            f"sqlite:///{tmp_path}/c.db",
            "--format",
            "collapsed",
            "--view",
            "gpu",
        ]
    )
    assert rc == 2 and "kubeprof record --gpu" in capsys.readouterr().err
    rc = main(["report", "--store", f"sqlite:///{tmp_path}/c.db", "--format", "collapsed"])
    assert rc == 0 and "main 1" in capsys.readouterr().out
