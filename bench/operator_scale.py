"""Time from `kubectl apply` of a ProfilingSession to every agent scheduled, on N simulated
GPU nodes (kwok) of a real control plane, with the real operator; and the size of every
object the operator wrote.

The target workload is a DaemonSet, so one target pod runs on every GPU node and the
session's agents must run on all N nodes: in ceil(N / shard) DaemonSets of at most
`--shard-nodes` nodes each (operator flag --agent-shard-nodes).

Milestones: phase Running; every shard DaemonSet created (pinning exactly the N target
nodes); every DaemonSet's desiredNumberScheduled equal to the nodes it pins (the DaemonSet
controller agrees); all agent pods scheduled and all Ready, as the DaemonSets' status says;
all agent pods bound to a node and all Running (kwok), counted from the pods themselves
every 5 s (the DaemonSet status lags on an overloaded control plane). Then the size of each
object the operator wrote, as JSON from the API server: the DaemonSets, the
ProfilingSession (its status), Events, Secrets and ConfigMaps in the namespace.

Usage:
  .venv/bin/python bench/operator_scale.py [--nodes 10000] [--shard-nodes 500]
      [--lease-s 40] [--keep]
Prints Markdown tables.
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

from kubeprof.operator import build, shards  # noqa: E402
from kubeprof.operator.config import OperatorConfig  # noqa: E402
from kubeprof.operator.spec import parse  # noqa: E402
from tests.e2e import operator_helpers as h  # noqa: E402
from tests.e2e.cluster import Cluster, Postgres  # noqa: E402
from tests.e2e.cluster.nodes import names as node_names  # noqa: E402

NS = "bench-scale"
SESSION = "scale"
AGENTS = f"kubeprof.dev%2Fsession%3D{SESSION}%2Capp.kubernetes.io%2Fcomponent%3Dagent"


def targets_ds() -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "trainer", "namespace": NS},
            "spec": {
                "selector": {"matchLabels": {"app": "trainer"}},
                "template": {
                    "metadata": {"labels": {"app": "trainer"}},
                    "spec": {
                        "nodeSelector": {"nvidia.com/gpu.present": "true"},
                        "containers": [{"name": "main", "image": "registry.invalid/t:0"}],
                    },
                },
            },
        }
    )


def pinned(ds: dict) -> list[str]:
    try:
        terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
    except KeyError:
        return []
    return [t["matchFields"][0]["values"][0] for t in terms]


METADATA = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def count_pods(c: Cluster, labels: str, fields: str) -> int:
    """Pods in NS matching a label and a field selector, counted from metadata only.

    The DaemonSet controller's status counters stop following on this overloaded control
    plane (numberReady stalled at 2,325 of 3,000 while every pod was Running), so the
    milestones count the pods themselves.
    """
    path = f"/api/v1/namespaces/{NS}/pods?labelSelector={labels}&fieldSelector={fields}"
    return len(c.api.request("GET", path, timeout=60, accept=METADATA)["items"] or [])


SCHEDULED = "spec.nodeName%21%3D"  # spec.nodeName!=
RUNNING = "status.phase%3DRunning"  # kwok marks a pod Running and Ready at once


def sizes(items: list[dict]) -> tuple[int, int]:
    """(count, largest JSON size in bytes)."""
    return len(items), max((len(json.dumps(i)) for i in items), default=0)


def unsharded_bytes(n: int) -> int:
    """The size one DaemonSet pinning all n nodes would have (the builder, no cluster)."""
    body = {"metadata": {"name": SESSION, "namespace": NS, "uid": "0" * 36}}
    spec = parse(yaml.safe_load(h.session_yaml(SESSION, NS, "trainer", "1h"))["spec"])
    nodes = [name for name, gpu in node_names(n, 0) if gpu]
    return len(json.dumps(build.build_daemonset(body, spec, nodes, OperatorConfig(""), 0.0)))


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--nodes", type=int, default=10000)
    p.add_argument("--shard-nodes", type=int, default=OperatorConfig("").agent_shard_nodes)
    p.add_argument(
        "--lease-s",
        type=int,
        default=40,
        help="kwok node Lease duration (renewed every quarter of it)",
    )
    p.add_argument("--keep", action="store_true", help="leave the cluster running")
    p.add_argument("--interval", type=float, default=2.0, help="operator reconcile interval")
    p.add_argument("--timeout", type=float, default=1800.0)
    args = p.parse_args()
    n = args.nodes
    want_sets = shards.count(n, args.shard_nodes)
    work = Path(tempfile.mkdtemp(prefix="kubeprof-bench-scale-"))
    work.chmod(0o711)
    t = time.monotonic()
    c = Cluster(work / "run", gpu_nodes=n, cpu_nodes=0, node_lease_s=args.lease_s)
    c.up(timeout_scale=4)
    print(f"cluster with {n} GPU nodes up in {time.monotonic() - t:.0f}s", file=sys.stderr)
    pg = Postgres(work / "pg").start()
    op = None
    try:
        h.apply_crd(c)
        c.kubectl("create", "namespace", NS)
        h.poll(
            lambda: c.kubectl("get", "sa", "default", "-n", NS, check=False).returncode == 0,
            60,
            "default ServiceAccount",
        )
        c.kubectl("apply", "-f", "-", stdin=targets_ds())
        t = time.monotonic()
        h.poll(
            lambda: count_pods(c, "app%3Dtrainer", RUNNING) == n,
            args.timeout,
            f"{n} target pods Running",
            interval=10,
        )
        print(f"{n} target pods Running in {time.monotonic() - t:.0f}s", file=sys.stderr)
        op = h.Operator(
            c,
            pg.url,
            work,
            interval_s=args.interval,
            args=("--agent-shard-nodes", str(args.shard_nodes)),
            # The cluster's admin, as in the tables' runs (the e2e tests' default is the
            # chart's ServiceAccount; the bench needs no helm).
            chart_values=None,
        ).start()

        doc = yaml.safe_load(h.session_yaml(SESSION, NS, "trainer", "2h"))
        t0 = time.monotonic()
        c.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(doc))
        marks: dict[str, float] = {}
        every = {name for name, _ in node_names(n, 0)}
        next_count = 0.0
        while len(marks) < 7 and time.monotonic() - t0 < args.timeout:
            now = time.monotonic() - t0
            cr = c.api.get(
                f"/apis/kubeprof.dev/v1alpha1/namespaces/{NS}/profilingsessions/{SESSION}"
            )
            if (cr.get("status") or {}).get("phase") == "Running":
                marks.setdefault("phase Running", now)
            sets = c.api.get(f"/apis/apps/v1/namespaces/{NS}/daemonsets?labelSelector={AGENTS}")[
                "items"
            ]
            pins = [pinned(d) for d in sets]
            if len(sets) == want_sets and sorted(x for p_ in pins for x in p_) == sorted(every):
                marks.setdefault(f"all {want_sets} DaemonSets made, pinning the {n} nodes", now)
            st = [d.get("status") or {} for d in sets]
            if len(sets) == want_sets and all(
                s.get("desiredNumberScheduled") == len(p_) for s, p_ in zip(st, pins, strict=True)
            ):
                marks.setdefault(
                    f"every DaemonSet desires its pinned nodes (sum {sum(len(p_) for p_ in pins)})",
                    now,
                )
            if len(sets) == want_sets and sum(s.get("currentNumberScheduled", 0) for s in st) == n:
                marks.setdefault(f"DaemonSet status: all {n} agent pods scheduled", now)
            if len(sets) == want_sets and sum(s.get("numberReady", 0) for s in st) == n:
                marks.setdefault(f"DaemonSet status: all {n} agent pods Ready", now)
            if now >= next_count:  # listing thousands of pods is not free: every 5 s
                next_count = now + 5
                if count_pods(c, AGENTS, SCHEDULED) == n:
                    marks.setdefault(f"all {n} agent pods bound to a node (pods counted)", now)
                if count_pods(c, AGENTS, RUNNING) == n:
                    marks.setdefault(f"all {n} agent pods Running (kwok; pods counted)", now)
            time.sleep(1.0)
        print(f"\nshard size {args.shard_nodes}, kwok lease {args.lease_s}s\n")
        print("| nodes | milestone | seconds after kubectl apply |\n|---:|---|---:|")
        for k, v in sorted(marks.items(), key=lambda kv: kv[1]):
            print(f"| {n} | {k} | {v:.1f} |")

        sets = c.api.get(f"/apis/apps/v1/namespaces/{NS}/daemonsets?labelSelector={AGENTS}")[
            "items"
        ]
        cr = c.api.get(f"/apis/kubeprof.dev/v1alpha1/namespaces/{NS}/profilingsessions/{SESSION}")
        events = c.api.get(f"/api/v1/namespaces/{NS}/events")["items"]
        secrets = c.api.get(f"/api/v1/namespaces/{NS}/secrets")["items"]
        cms = c.api.get(f"/api/v1/namespaces/{NS}/configmaps")["items"]
        ours = [s for s in secrets if s["metadata"]["name"].startswith("kubeprof-")]
        print("\n| object the operator wrote | count | largest (bytes, JSON) |\n|---|---:|---:|")
        for what, items in (
            ("agent DaemonSets", sets),
            ("ProfilingSession (with .status)", [cr]),
            ("Events in the namespace (any writer)", events),
            ("Secrets (kubeprof-*)", ours),
            ("ConfigMaps in the namespace (any writer)", cms),
        ):
            k, big = sizes(items)
            print(f"| {what} | {k} | {big:,} |")
        print(
            f"| (one unsharded DaemonSet for all {n} nodes, built, not applied) | - | "
            f"{unsharded_bytes(n):,} |"
        )
        print(f"\nstatus.agents: {json.dumps(cr.get('status', {}).get('agents'))}", file=sys.stderr)
    finally:
        if op is not None:
            op.stop()
        pg.stop()
        if not args.keep:
            c.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
