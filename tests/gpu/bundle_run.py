"""The agent image's tracer bundle, laid out as the init container copies it, traces real CUDA.

    python3 tests/gpu/bundle_run.py BUNDLE_DIR --out OUT.json     # a CUDA GPU + torch

BUNDLE_DIR is the image's ``/opt/kubeprof/tracer`` (``lib/``, ``deps/``, ``py/cp3XY/``). The
workload gets exactly the environment the injection webhook gives a pod's container
(``webhook._env_for``: the bundle's ``sitecustomize`` folder and ``lib/`` first on PYTHONPATH,
KUBEPROF_GPU_DORMANT=1, the pod's control-socket folder, KUBEPROF_GPU_BUNDLE), with the pod's
mount paths mapped to local folders; nothing of this checkout is on its path. It starts
dormant; this process, standing in for the node agent, switches it on over its control socket
(as the agent does) and receives its records with the agent's ``GpuReceiver``. The workload
times its own main loop with CUDA events and counts its kernels; the result compares the two.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

WORKLOAD = r"""
import json, os, sys, time
import torch
x = torch.ones(1024, device="cuda")
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)
for _ in range(20):
    torch.matmul(a, a, out=c); x.add_(1.0)
torch.cuda.synchronize()
print("ready", flush=True)
go = sys.argv[1]
while not os.path.exists(go):
    time.sleep(0.01)
time.sleep(0.5)  # the tracer's switch-on completes (activity buffers enabled)
steps = 300
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
t0 = time.monotonic_ns()
e0.record()
for _ in range(steps):
    torch.matmul(a, a, out=c)
    x.add_(1.0)
e1.record()
torch.cuda.synchronize()
t1 = time.monotonic_ns()
mods = {n: getattr(sys.modules.get(n), "__file__", None)
        for n in ("kubeprof", "kubeprof.agent.gpu._launchhook", "cupti")}
print("BUNDLE_TRUTH " + json.dumps({
    "kernels": 2 * steps, "wall_ms": e0.elapsed_time(e1), "loop_start_ns": t0,
    "loop_end_ns": t1, "modules": mods, "python": sys.version.split()[0]}), flush=True)
time.sleep(1.0)  # let the tracer flush its last buffer before exit
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bundle", type=Path)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    sys.path[:0] = [str(REPO / "src"), str(REPO / "agent"), str(REPO / "operator")]
    from kubeprof.agent.gpu.control import switch
    from kubeprof.agent.gpu.receiver import GpuReceiver
    from kubeprof.operator.webhook import InjectConfig, _env_for

    cfg = InjectConfig(image="ghcr.io/kubeprof/kubeprof-agent")
    work = Path(tempfile.mkdtemp(prefix="kpbundle-"))
    pod_uid = str(uuid.uuid4())
    mapping = {cfg.mount_path: str(args.bundle.resolve()), cfg.socket_mount_path: str(work)}

    def local(v: str) -> str:
        """A pod path (or a ':'-list of them) as this machine's folder."""
        out = []
        for part in v.split(":"):
            for pod_path in sorted(mapping, key=len, reverse=True):  # /run/kubeprof first
                if part == pod_path or part.startswith(pod_path + "/"):
                    part = mapping[pod_path] + part[len(pod_path) :]
                    break
            out.append(part)
        return ":".join(out)

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for e in _env_for({"name": "main"}, cfg):
        env[e["name"]] = pod_uid if "valueFrom" in e else local(e["value"])
    # nothing of this process's PYTHONPATH (this checkout, carried wheels) reaches the pod
    rx_sock = env["KUBEPROF_GPU_SOCKET"]
    Path(rx_sock).parent.mkdir(parents=True, exist_ok=True)
    Path(env["KUBEPROF_GPU_CTL_DIR"]).mkdir(parents=True, exist_ok=True)
    rx = GpuReceiver(rx_sock)
    rx.start()
    go = work / "go"
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKLOAD, str(go)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(work),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    ctl = Path(env["KUBEPROF_GPU_CTL_DIR"])
    socks = sorted(ctl.glob("*.sock"))
    status_before = switch(socks[0], "status") if socks else "no control socket"
    answer = switch(socks[0], "on", timeout_s=60) if socks else "no control socket"
    status_after = switch(socks[0], "status") if socks else ""
    go.touch()
    out, err = proc.communicate(timeout=300)
    time.sleep(1.0)
    batch = rx.stop()
    truth = {}
    for ln in out.splitlines():
        if ln.startswith("BUNDLE_TRUTH "):
            truth = json.loads(ln[len("BUNDLE_TRUTH ") :])
    kernels = [a for a in batch.gpu_activities if a.kind == "kernel"]
    loop = [
        a
        for a in kernels
        if truth and truth["loop_start_ns"] <= a.start_ns <= truth["loop_end_ns"] + 10**9
    ]
    busy_ms = 0.0
    end = 0
    for a in sorted(loop, key=lambda a: a.start_ns):
        s = max(a.start_ns, end)
        if a.end_ns > s:
            busy_ms += (a.end_ns - s) / 1e6
        end = max(end, a.end_ns)
    with_stack = sum(1 for a in loop if a.stack)
    result = {
        "ready_line": line,
        "status_before": status_before,
        "switch_answer": answer,
        "status_after": status_after,
        "returncode": proc.returncode,
        "truth": truth,
        "kernels_received": len(kernels),
        "loop_kernels_received": len(loop),
        "loop_kernels_with_python_stack": with_stack,
        "loop_kernel_busy_ms": round(busy_ms, 3),
        "stderr_tail": err[-2000:],
        "bundle_env": {k: env[k] for k in env if k.startswith("KUBEPROF_") or k == "PYTHONPATH"},
    }
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "stderr_tail"}, indent=1))
    print(err[-1500:], file=sys.stderr)
    return 0 if truth and loop else 1


if __name__ == "__main__":
    sys.exit(main())
