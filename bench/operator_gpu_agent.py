"""On a real GPU: the cluster agent's NVML path end to end, and the GPU idle it yields.

A torch workload that keeps the GPU busy about half of the time runs in a cgroup named like
the kubelet's for a made-up pod UID; a real `kubeprof agent --collectors nvml --pod-uid UID`
samples NVML and ships batches to a small stand-in of the ingest API (same codec, same
BatchWriter, SQLite); then the operator's aggregation computes GPU idle per GPU and per pod.

Usage (on the GPU machine, repo root):
  python3 bench/operator_gpu_agent.py [--seconds 12] [--busy 0.5]
Prints one JSON line with the results.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for sub in ("src", "agent", "operator"):
    sys.path.insert(0, str(ROOT / sub))

from kubeprof.agent.cluster.cgroups import cgroup_name  # noqa: E402
from kubeprof.operator import aggregate  # noqa: E402
from kubeprof.operator.db import BatchWriter, ensure_session  # noqa: E402
from kubeprof.protocol import codec  # noqa: E402
from kubeprof.storage import Store  # noqa: E402

WORKLOAD = """
import sys, time, torch
busy, end = float(sys.argv[1]), time.monotonic() + float(sys.argv[2])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
while time.monotonic() < end:
    t = time.monotonic()
    while time.monotonic() - t < busy:
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    time.sleep(1.0 - busy)
"""


def stand_in_ingest(store: Store, sid: int) -> tuple[ThreadingHTTPServer, dict]:
    """POST /v1/sessions/*/batches -> BatchWriter (what the operator's ingest does)."""
    writer, stats = BatchWriter(store.engine), {"batches": 0, "rows": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            batch_id, node, batch = codec.decode(body, gzipped=body[:2] == b"\x1f\x8b")
            stored = writer.store(sid, batch_id, node, batch)
            stats["batches"] += 1
            stats["rows"] += stored.rows
            out = json.dumps({"rows": stored.rows, "duplicate": stored.duplicate}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *_args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, stats


def cgroup_root() -> Path | None:
    for p in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (p / "cgroup.controllers").exists():
            return p
    return None


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seconds", type=float, default=12)
    p.add_argument("--busy", type=float, default=0.5, help="busy share of each second")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kubeprof-gpu-agent-"))
    store = Store.open(f"sqlite:///{work}/k.db")
    uid = str(uuid.uuid4())
    sid = ensure_session(
        store.engine, "gpu", "check", uid, hz=99, started_at=datetime.now(UTC), meta={}
    )
    srv, stats = stand_in_ingest(store, sid)
    result: dict = {"pod_uid": uid}

    cg = None
    root = cgroup_root()
    if root is not None:
        cg = root / cgroup_name(uid, uuid.uuid4().hex * 2)
        try:
            cg.mkdir(parents=True)
        except OSError as exc:
            result["cgroup_error"] = str(exc)
            cg = None
    prefix = f"echo $$ > {cg}/cgroup.procs && " if cg else ""
    wl = subprocess.Popen(
        [
            "sh",
            "-c",
            prefix + 'exec "$0" -c "$1" "$2" "$3"',
            sys.executable,
            WORKLOAD,
            str(args.busy),
            str(args.seconds + 4),
        ]
    )
    time.sleep(2)  # CUDA context up before sampling starts
    token = work / "token"
    token.write_text("t")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(ROOT / s) for s in ("src", "agent", "operator")),
    }
    agent = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubeprof.cli",
            "agent",
            "--collectors",
            "nvml",
            "--pod-uid",
            uid,
            "--node-name",
            "gpu-node",
            "--namespace",
            "gpu",
            "--session",
            "check",
            "--ingest-url",
            f"http://127.0.0.1:{srv.server_port}",
            "--token-file",
            str(token),
            "--spool-dir",
            str(work / "spool"),
            "--nvml-interval",
            "0.1",
            "--end-time",
            str(time.time() + args.seconds),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=args.seconds + 120,
    )
    wl.wait(60)
    srv.shutdown()
    with store.engine.begin() as conn:
        s = aggregate.aggregate(conn, sid)
    result.update(
        agent_rc=agent.returncode,
        agent_log_tail=agent.stderr[-1500:],
        ingest=stats,
        expected_idle=round(1 - args.busy, 2),
        session_gpu_idle=s.gpu_idle,
        session_gpu_idle_source=s.gpu_idle_source,
        gpus=[g.__dict__ | {"pods": g.pods} for g in s.gpus],
        pods={k: v.gpu_idle for k, v in s.pods.items()},
        processes=s.processes,
    )
    if cg is not None:
        with contextlib.suppress(OSError):
            cg.rmdir()
    print(json.dumps(result, default=str))
    return 0 if agent.returncode == 0 and s.gpus else 1


if __name__ == "__main__":
    sys.exit(main())
