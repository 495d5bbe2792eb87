"""The injected tracer stays dormant until the node agent switches it on (gpu/control.py).

dormant (no CUPTI subscription) -> on -> off -> on, with kernels recorded only while on; an
unsupported case answers with its reason once and leaves the workload alone; a real Python
child started with the injected environment answers on its control socket.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from kubeprof.agent.gpu import control, inject
from kubeprof.agent.gpu.receiver import GpuReceiver
from kubeprof.agent.gpu.tracer import TracerError


@pytest.fixture
def quiet_exit(monkeypatch):
    """bootstrap registers atexit handlers; keep them out of the test process."""
    calls: list = []
    monkeypatch.setattr(inject.atexit, "register", lambda fn, *a: calls.append(fn))
    monkeypatch.setattr(inject, "_tracer", None)
    return calls


def kernels(rx: GpuReceiver) -> list[str]:
    return [a.name for a in rx.stop(2.0).gpu_activities]


def test_dormant_on_off_on_records_kernels_only_while_on(fake, tmp_path, monkeypatch, quiet_exit):
    gpu_sock = str(tmp_path / "gpu.sock")
    rx = GpuReceiver(gpu_sock)
    rx.start()
    monkeypatch.setenv("KUBEPROF_GPU_SOCKET", gpu_sock)
    monkeypatch.setenv("KUBEPROF_GPU_DORMANT", "1")
    monkeypatch.setenv("KUBEPROF_GPU_KINDS", "kernel")
    monkeypatch.setenv("KUBEPROF_POD_UID", "uid-1")
    dormant = inject.bootstrap()
    assert isinstance(dormant, control.DormantTracer)
    [ctl] = control.pod_sockets(gpu_sock, "uid-1")
    assert ctl.name.startswith(f"{os.getpid()}-") and ctl.name.endswith(".sock")

    assert fake.callback is None and not fake.activities  # dormant: not even subscribed
    assert control.switch(ctl, "status") == "dormant"
    for _ in range(3):
        fake.launch("_Z7dormantv")
    assert control.switch(ctl, "on") == "ok on"
    assert fake.callback is not None
    for _ in range(5):
        fake.launch("_Z3onev")
    assert control.switch(ctl, "off") == "ok off"
    assert fake.callback is None and not fake.activities  # CUPTI free again
    for _ in range(4):
        fake.launch("_Z3offv")
    assert control.switch(ctl, "on") == "ok on"
    assert control.switch(ctl, "on") == "ok on"  # idempotent
    for _ in range(2):
        fake.launch("_Z3twov")
    assert control.switch(ctl, "status") == "on"
    assert control.switch(ctl, "off") == "ok off"
    assert sorted(kernels(rx)) == ["_Z3onev"] * 5 + ["_Z3twov"] * 2
    for fn in quiet_exit:
        fn()  # what interpreter exit does: closes and removes the control socket
    assert not ctl.exists()


def test_unsupported_is_said_once_and_answered_every_time(capsys):
    calls = []

    def make(receiver):
        calls.append(receiver)
        raise TracerError("no GPU: no /dev/nvidia<N> device in this process's view")

    d = control.DormantTracer(make, lambda t: sys.stderr.write(f"kubeprof-gpu: {t}\n"))
    assert d.on().startswith("error: no GPU")
    assert d.on().startswith("error: no GPU")
    assert d.handle("status").startswith("unsupported: no GPU")
    assert len(calls) == 1  # not retried: the reason does not change within a process
    assert capsys.readouterr().err.count("GPU tracing unavailable") == 1
    assert d.handle("bogus").startswith("error: unknown command")


@pytest.mark.parametrize(
    ("version", "ok"), [((3, 9), False), ((3, 10), True), ((3, 13), True), ((3, 14), False)]
)
def test_supported_pythons(version, ok):
    assert (control.python_unsupported(version) == "") is ok


def test_unusable_socket_folder_leaves_the_process_untraced(
    tmp_path, monkeypatch, capsys, quiet_exit
):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("KUBEPROF_GPU_SOCKET", str(blocker / "gpu.sock"))
    monkeypatch.setenv("KUBEPROF_GPU_DORMANT", "1")
    assert inject.bootstrap() is None
    err = capsys.readouterr().err
    assert "cannot create the control socket" in err and "writable" in err


def test_real_child_with_the_injected_env_answers_and_runs_on(tmp_path):
    """A plain Python child, only the injected environment: its control socket answers."""
    gpu_sock = str(tmp_path / "gpu.sock")
    go = tmp_path / "go"
    env = {
        **os.environ,
        **inject.tracer_env(gpu_sock),
        "KUBEPROF_GPU_DORMANT": "1",
        "KUBEPROF_POD_UID": "uid-child",
    }
    code = (
        f"import pathlib, time\np = pathlib.Path({str(go)!r})\n"
        "while not p.exists(): time.sleep(0.02)\nprint('workload done')\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while not control.pod_sockets(gpu_sock, "uid-child"):
            assert child.poll() is None and time.monotonic() < deadline, child.stderr.read()
            time.sleep(0.05)
        [ctl] = control.pod_sockets(gpu_sock, "uid-child")
        assert ctl.name.startswith(f"{child.pid}-")
        assert control.switch(ctl, "status") == "dormant"
        answer = control.switch(ctl, "on")  # this machine: no GPU or no cupti -> a reason
        if answer != "ok on":
            assert answer.startswith("error: ") and len(answer) > len("error: ")
            assert control.switch(ctl, "status").startswith("unsupported: ")
        control.switch(ctl, "off")
    finally:
        go.write_text("")
        out, err = child.communicate(timeout=30)
    assert child.returncode == 0 and out == "workload done\n", err
    assert not control.pod_sockets(gpu_sock, "uid-child")  # removed at exit
