"""Run the real CPU collector on one PID for a few seconds; print what it got as JSON.

Started by test_agent_capabilities.py under `setpriv` with exactly the agent's capability
set (or one less), so what it prints is what the DaemonSet's agent would get.
Usage: python cap_probe.py PID SECONDS
"""

import json
import os
import sys
import time

from kubeprof.agent.cpu.collector import CollectorError, CpuCollector
from kubeprof.model import FrameKind


def main() -> None:
    pid, seconds = int(sys.argv[1]), float(sys.argv[2])
    with open("/proc/self/status") as f:
        caps = next(line.split()[1] for line in f if line.startswith("CapEff:"))
    out = {
        "cap_eff": caps,
        "error": None,
        "samples": 0,
        "python_hot": 0,
        "native_named": 0,
        "kernel_named": 0,
        "warnings": [],
        "root_readable": True,
    }
    try:  # how the agent opens a target's binaries when they sit in another container
        os.listdir(f"/proc/{pid}/root/")
    except OSError:
        out["root_readable"] = False
    try:
        c = CpuCollector(hz=99)
    except CollectorError as e:
        out["error"] = str(e)
        print(json.dumps(out))
        return
    samples = []
    try:
        c.add_target(pid)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.5)
            samples += c.poll().samples
    except CollectorError as e:
        out["error"] = str(e)
    finally:
        samples += c.stop().samples
    out["warnings"] = c.warnings
    out["samples"] = len(samples)
    for s in samples:
        kinds = {(f.kind, f.name) for f in s.stack}
        out["python_hot"] += any(k is FrameKind.PYTHON and n == "hot" for k, n in kinds)
        out["native_named"] += any(
            k is FrameKind.NATIVE and not n.startswith(("[", "0x")) for k, n in kinds
        )
        out["kernel_named"] += any(
            k is FrameKind.KERNEL and not n.startswith(("[", "0x")) for k, n in kinds
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
