"""On a GPU: each failure gives one clear line, the workload runs on, collected data is kept."""

from __future__ import annotations

import os
import subprocess

import pytest
from harness import NO_MULTICAST, REPO, python, run_traced

from kubeprof.agent.gpu.inject import tracer_env

pytestmark = pytest.mark.gpu

TINY = (
    "import torch; x = torch.ones(256, device='cuda'); [x.add_(1) for _ in range(1000)]; "
    "torch.cuda.synchronize(); print('workload ok', float(x[0]))"
)


def test_cupti_already_in_use_keeps_workload_running() -> None:
    code = (
        "from cupti import cupti\n"
        "sub = cupti.subscribe(lambda *a: None, None)\n"
        "from kubeprof.agent.gpu.inject import bootstrap\n"
        "assert bootstrap() is None\n" + TINY.replace("; ", "\n")
    )
    env = {**os.environ, **NO_MULTICAST, **tracer_env("/nonexistent/kp.sock")}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in env["PYTHONPATH"].split(os.pathsep) if not p.endswith("_site")
    )
    p = subprocess.run(
        [python(), "-c", code], env=env, capture_output=True, text=True, cwd=REPO, timeout=120
    )
    print(p.stderr[-500:])
    assert p.returncode == 0 and "workload ok" in p.stdout
    assert "CUPTI is already in use" in p.stderr


def test_receiver_gone_drops_and_counts() -> None:
    env = {**os.environ, **NO_MULTICAST, **tracer_env("/nonexistent/kp.sock")}
    p = subprocess.run(
        [python(), "-c", TINY], env=env, capture_output=True, text=True, cwd=REPO, timeout=120
    )
    print(p.stderr[-500:])
    assert p.returncode == 0 and "workload ok" in p.stdout
    assert "dropped" in p.stderr


def test_target_killed_mid_trace_keeps_data() -> None:
    argv = [python(), str(REPO / "examples" / "train_torch.py"), "--steps", "100000"]
    t = run_traced(argv, kill_after_s=20)
    print(t.counters, t.messages[:3])
    assert t.returncode != 0
    assert t.counters.get("gpu_target_exited_early") == 1
    assert len(t.kernels) > 1000


def test_fork_after_tracer_start_leaves_cuda_usable_in_child() -> None:
    code = (
        "import os, torch\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    x = torch.ones(4, device='cuda')\n"
        "    os._exit(0 if float(x.sum()) == 4 else 3)\n"
        "_, st = os.waitpid(pid, 0); print('child status', st)\n" + TINY.replace("; ", "\n")
    )
    t = run_traced([python(), "-c", code])
    print(t.stdout, t.stderr[-300:])
    assert t.returncode == 0
    assert "child status 0" in t.stdout


def test_sitecustomize_chain_and_env_only_injection(tmp_path, monkeypatch) -> None:
    """What the cluster agent does: only environment variables, no recorder code in the child;
    a sitecustomize of the user's, which ours shadows on PYTHONPATH, still runs."""
    (tmp_path / "sitecustomize.py").write_text("print('user sitecustomize ran', flush=True)\n")
    old = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (old, str(tmp_path)) if p))
    t = run_traced([python(), "-c", TINY])  # tracer_env() puts ours first, the user's after
    assert t.returncode == 0, t.stderr[-500:]
    assert "user sitecustomize ran" in t.stdout and "workload ok 1001.0" in t.stdout
    adds = [k for k in t.kernels if k.stack and k.stack[0].file == "<string>"]
    assert len(adds) >= 1000  # each add_ joined to the -c program's Python frame
