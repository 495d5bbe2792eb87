"""The node agent's side for test_tracer_sockets_nonroot.py, run as root with only the
DaemonSet's capabilities (no CAP_DAC_OVERRIDE): the session's receiver in the node's rx/
folder and the switchboard, reaching each pod's control socket through /proc/<pid>/root.

argv: rx socket path, the ctl folder inside pods, a JSON {pid: pod uid}, seconds on.
Prints one JSON line: its effective capabilities, what the switchboard did, the kernels
the receiver got per pid.
"""

import json
import sys
import time
from pathlib import Path

from kubeprof.agent.cluster.tracers import TracerSwitchboard
from kubeprof.agent.gpu.receiver import GpuReceiver
from kubeprof.model import ProcessInfo

rx_path, ctl_dir, pods_json, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
pods = {int(k): v for k, v in json.loads(pods_json).items()}
rx = GpuReceiver(rx_path, mode=0o666)
rx.accept_peer = lambda pid: pid in pods
rx.start()
board = TracerSwitchboard(Path(rx_path).stem, ctl_dir, pod_of=lambda pid: pods.get(pid, ""))
procs = {pid: ProcessInfo(pid, 0, "python", "", "c", uid) for pid, uid in pods.items()}
board.sync(set(pods.values()), procs)
on = sorted(f"{k[0]}/{k[1]}" for k in board.on)
time.sleep(seconds)
board.all_off()
time.sleep(0.5)
batch = rx.stop(5.0)
kernels: dict[int, int] = {}
for a in batch.gpu_activities:
    kernels[a.pid] = kernels.get(a.pid, 0) + 1
cap_eff = next(
    line.split()[1]
    for line in Path("/proc/self/status").read_text().splitlines()
    if line.startswith("CapEff:")
)
print(
    json.dumps(
        {
            "cap_eff": cap_eff,
            "on": on,
            "refused": {f"{k[0]}/{k[1]}": v for k, v in board.refused.items()},
            "states": [[s.pod_uid, s.pid, s.state] for s in board.states()],
            "kernels": {str(k): v for k, v in kernels.items()},
        }
    )
)
