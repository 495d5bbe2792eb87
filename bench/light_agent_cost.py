"""Per-node cost of the light agent (`kubeprof agent --light`) without the NVML calls.

Runs the agent's own work for GPUS x PROCS GPU processes (each its own pod): parse every
process's /proc/<pid>/cgroup, attribute, add to a 60 s window, and render /metrics every
SCRAPE polls, for POLLS polls on a simulated clock (no sleeping). Prints CPU seconds per
poll (= CPU share at --interval 1) and peak RSS. NVML's own call cost is not included: it
can only be measured on a GPU node (gpu-notes.md: microseconds per call on the H200).

    .venv/bin/python bench/light_agent_cost.py [GPUS] [PROCS] [POLLS]
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from kubeprof.agent.cluster.cgroups import cgroup_name
from kubeprof.agent.light.exporter import WindowCollector
from kubeprof.agent.light.pods import Resolver, pod_names
from kubeprof.agent.light.readings import DeviceReading, ProcessSample, RunningProcess
from kubeprof.agent.light.window import Window, attribute


def main() -> None:
    gpus, procs, polls = (int(a) for a in (sys.argv[1:] + ["8", "16", "600"][len(sys.argv) - 1 :]))
    root = Path(tempfile.mkdtemp(prefix="kubeprof-bench-light-"))
    pods, pid = [], 1000
    pids: dict[int, list[int]] = {}
    for g in range(gpus):
        for _ in range(procs):
            uid, cid = str(uuid.uuid4()), uuid.uuid4().hex * 2
            (root / str(pid)).mkdir()
            (root / str(pid) / "cgroup").write_text(f"0::/{cgroup_name(uid, cid)}\n")
            pods.append(
                {
                    "metadata": {"uid": uid, "namespace": "ml", "name": f"p-{pid}"},
                    "status": {
                        "containerStatuses": [
                            {"name": "main", "containerID": f"containerd://{cid}"}
                        ]
                    },
                }
            )
            pids.setdefault(g, []).append(pid)
            pid += 1
    resolver = Resolver(root, pod_names(pods))
    window = Window(60)
    reg = CollectorRegistry()
    reg.register(WindowCollector(window, "node-1"))
    scrape_every = 15
    size = 0
    t0 = time.process_time()
    for i in range(polls):
        readings = [
            DeviceReading(
                g,
                f"GPU-{g}",
                50,
                1 << 34,
                1 << 37,
                tuple(RunningProcess(p, 1 << 30) for p in ps),
                tuple(ProcessSample(p, i * 1000 + 1, (p * 7 + i) % 100) for p in ps),
            )
            for g, ps in pids.items()
        ]
        window.add(float(i), [attribute(r, resolver) for r in readings])
        if i % scrape_every == 0:
            size = len(generate_latest(reg))
    cpu = time.process_time() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"gpus={gpus} procs/gpu={procs} polls={polls} scrape every {scrape_every} polls")
    print(
        f"cpu per poll: {cpu / polls * 1e3:.2f} ms  (at --interval 1: {cpu / polls * 100:.2f} "
        f"% of one core)  peak RSS {rss_mb:.0f} MiB  /metrics {size / 1024:.0f} KiB"
    )


if __name__ == "__main__":
    main()
