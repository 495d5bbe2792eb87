"""Preflight messages: one line naming the cause and the fix."""

import subprocess
import sys

from kubeprof.agent.cpu import preflight


def _one_line(msg):
    assert msg and "\n" not in msg
    return msg


def test_permission_needs_root_or_bpf_and_perfmon():
    # Root in a container has only the capabilities granted: the uid alone is not enough.
    assert "CAP_BPF and CAP_PERFMON missing, although running as root" in _one_line(
        preflight.permission_problem(0, 0)
    )
    both = 1 << preflight.CAP_BPF | 1 << preflight.CAP_PERFMON
    assert preflight.permission_problem(1000, both) is None
    assert preflight.permission_problem(1000, 1 << preflight.CAP_SYS_ADMIN) is None
    msg = _one_line(preflight.permission_problem(1000, 1 << preflight.CAP_BPF))
    assert "permission" in msg and "root" in msg and "CAP_PERFMON" in msg


def test_effective_caps_parses_status():
    assert preflight.effective_caps("Name:\tx\nCapEff:\t000001c000000000\n") == 0x1C000000000
    assert preflight.effective_caps("Name:\tx\n") == 0


def test_missing_headers_names_kernel_and_fix(tmp_path):
    msg = _one_line(preflight.headers_problem(str(tmp_path), "6.18.1-test"))
    assert "6.18.1-test" in msg and "setup-ebpf.sh" in msg
    build = tmp_path / "lib/modules/6.18.1-test/build"
    build.mkdir(parents=True)
    (build / "Makefile").write_text("")
    assert preflight.headers_problem(str(tmp_path), "6.18.1-test") is None


def test_tracefs_not_mounted(tmp_path):
    msg = _one_line(preflight.tracefs_problem(str(tmp_path)))
    assert "tracefs" in msg and "mount -t tracefs" in msg
    (tmp_path / "sys/kernel/tracing/events").mkdir(parents=True)
    assert preflight.tracefs_problem(str(tmp_path)) is None


def test_unknown_and_exited_pids():
    msg = _one_line(preflight.pid_problem(2**22 + 12345))
    assert "no process with PID" in msg
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        import time

        for _ in range(200):  # wait until it is a zombie (not reaped yet)
            if preflight.pid_problem(child.pid):
                break
            time.sleep(0.01)
        msg = _one_line(preflight.pid_problem(child.pid))
        assert "already exited" in msg
    finally:
        child.wait()


def test_load_errors_become_one_line():
    msg = _one_line(preflight.explain_load_error(PermissionError(1, "Operation not permitted")))
    assert "permission" in msg
    msg = _one_line(preflight.explain_load_error(Exception("boom\nlong compiler log\n...")))
    assert "boom" in msg and "setup-ebpf.sh" in msg
