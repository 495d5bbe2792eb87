"""A pod's Python process for test_tracer_sockets_nonroot.py (runs as a non-root uid).

Loads the dormant tracer exactly as an injected pod does (KUBEPROF_GPU_* from the webhook),
with the fake CUPTI standing in for a GPU; reports what it could do in the pod's view, then
launches a "kernel" every 20 ms while the node agent has it on, until stdin closes.
"""

import errno
import json
import os
import select
import socket
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "gpu"))
from fake_cupti import FakeCupti

from kubeprof.agent.gpu import inject
from kubeprof.agent.gpu import tracer as tracer_mod

fk = FakeCupti()
pkg = types.ModuleType("cupti")
pkg.cupti = fk.module()  # type: ignore[attr-defined]
sys.modules["cupti"] = pkg
sys.modules["cupti.cupti"] = pkg.cupti  # type: ignore[attr-defined]
tracer_mod.preflight = lambda: None  # type: ignore[assignment]
tracer_mod._version_check = lambda c: {"libcupti": ""}  # type: ignore[assignment]

dormant = inject.bootstrap()
rx_dir = Path(os.environ["KUBEPROF_GPU_SOCKET"]).parent
try:  # may a pod plant (or replace) a receiver? it must not
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(rx_dir / "planted.sock"))
    planted = "bound"
except OSError as exc:
    planted = errno.errorcode.get(exc.errno or 0, str(exc))
print(
    json.dumps(
        {
            "uid": os.getuid(),
            "dormant": dormant is not None,
            "planted": planted,
            "ctl": sorted(os.listdir(os.environ["KUBEPROF_GPU_CTL_DIR"])),
        }
    ),
    flush=True,
)
launched = 0
while not select.select([sys.stdin], [], [], 0.02)[0]:
    if dormant is not None and dormant.tracer is not None:
        fk.launch("_Z6kernelv")
        launched += 1
print(json.dumps({"launched": launched}), flush=True)
