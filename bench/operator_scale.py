"""Time from `kubectl apply` of a ProfilingSession to Running with every agent pod scheduled,
on N simulated GPU nodes (kwok) of a real control plane, with the real operator.

The target workload is a DaemonSet, so one target pod runs on every GPU node and the
session's agent DaemonSet must be pinned to all N nodes.

Usage:
  .venv/bin/python bench/operator_scale.py [--nodes 1000] [--keep]
Prints a Markdown table row per phase of the measurement.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from tests.e2e import operator_helpers as h  # noqa: E402
from tests.e2e.cluster import Cluster, Postgres  # noqa: E402

NS = "bench-scale"


def targets_ds() -> str:
    return yaml.safe_dump({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "trainer", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "trainer"}},
                 "template": {"metadata": {"labels": {"app": "trainer"}}, "spec": {
                     "nodeSelector": {"nvidia.com/gpu.present": "true"},
                     "containers": [{"name": "main", "image": "registry.invalid/t:0"}]}}},
    })


def ds_status(c: Cluster, name: str) -> dict:
    r = c.kubectl("get", "ds", "-n", NS, name, "-o", "json", check=False)
    return json.loads(r.stdout).get("status", {}) if r.returncode == 0 else {}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--keep", action="store_true", help="leave the cluster running")
    p.add_argument("--interval", type=float, default=2.0, help="operator reconcile interval")
    args = p.parse_args()
    n = args.nodes
    work = Path(tempfile.mkdtemp(prefix="kubeprof-bench-scale-"))
    work.chmod(0o711)
    t = time.monotonic()
    c = Cluster(work / "run", gpu_nodes=n, cpu_nodes=0).up(timeout_scale=4)
    print(f"cluster with {n} GPU nodes up in {time.monotonic() - t:.0f}s", file=sys.stderr)
    pg = Postgres(work / "pg").start()
    op = None
    try:
        h.apply_crd(c)
        c.kubectl("create", "namespace", NS)
        h.poll(lambda: c.kubectl("get", "sa", "default", "-n", NS, check=False).returncode
               == 0, 60, "default ServiceAccount")
        c.kubectl("apply", "-f", "-", stdin=targets_ds())
        t = time.monotonic()
        h.poll(lambda: ds_status(c, "trainer").get("numberReady") == n, 900,
               f"{n} target pods Ready", interval=2)
        print(f"{n} target pods Ready in {time.monotonic() - t:.0f}s", file=sys.stderr)
        op = h.Operator(c, pg.url, work, interval_s=args.interval).start()

        doc = yaml.safe_load(h.session_yaml("scale", NS, "trainer", "1h"))
        t0 = time.monotonic()
        c.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(doc))
        marks: dict[str, float] = {}
        agent = "kubeprof-scale-agent"
        while len(marks) < 4 and time.monotonic() - t0 < 900:
            st = (h.session(c, NS, "scale").get("status") or {})
            ds = ds_status(c, agent)
            now = time.monotonic() - t0
            if st.get("phase") == "Running":
                marks.setdefault("phase Running", now)
            if ds.get("desiredNumberScheduled") == n:
                marks.setdefault(f"DaemonSet desires {n} pods", now)
            if ds.get("currentNumberScheduled") == n:
                marks.setdefault(f"all {n} agent pods scheduled", now)
            if ds.get("numberReady") == n:
                marks.setdefault(f"all {n} agent pods Ready (kwok)", now)
            time.sleep(0.25)
        print("| nodes | milestone | seconds after kubectl apply |\n|---:|---|---:|")
        for k, v in sorted(marks.items(), key=lambda kv: kv[1]):
            print(f"| {n} | {k} | {v:.1f} |")
        ds = h.get_json(c, "get", "ds", "-n", NS, agent)
        print(f"agent DaemonSet object: {len(json.dumps(ds)):,} bytes", file=sys.stderr)
    finally:
        if op is not None:
            op.stop()
        pg.stop()
        if not args.keep:
            c.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
