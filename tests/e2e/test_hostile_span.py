"""One agent's claimed time span must not take the operator down (issue 32, items 1 and 3).

A real `kubeprof operator` on the real control plane and PostgreSQL, held in a memory
cgroup of the chart's default limit (1 GiB). An attacker session's agent token sends the
red team's batches: one GPU kernel "running" for 115 days (a 246-byte body), one whose end
is 2^63-1 ns, and a kernel 1 ns long but 115 days after the node's other records. Each is
refused 422 naming the field, nothing of it is stored, the operator stays up under the
limit, and an innocent session beside it gets every batch stored and completes. Records
spanning 11.6 days and 2^63-1 ns stored before these bounds existed can still be viewed
through the operator's JSON API (session page, flame graphs) within the same limit.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from urllib.request import urlopen

import psycopg
import pytest

from kubeprof.agent.cluster.client import IngestClient
from kubeprof.model import Batch, CpuSample, Frame, FrameKind, GpuActivity
from kubeprof.operator.db import BatchWriter
from kubeprof.protocol.codec import encode
from kubeprof.storage import Store
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster
from tests.e2e.memory_cap import MemoryCap

pytestmark = pytest.mark.e2e

CHART_LIMIT = 1 << 30  # charts/kubeprof/values.yaml: operator resources.limits.memory 1Gi
DAY_NS = 86400 * 1_000_000_000
STACK = (Frame("train_step", FrameKind.PYTHON, "/app/train.py", 12),)


@pytest.fixture(scope="module")
def workdir():
    if os.geteuid() != 0:
        pytest.skip("needs root (a memory cgroup around the operator)")
    d = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-span-"))
    yield d
    print(f"\nhostile span e2e logs: {d}")


@pytest.fixture(scope="module")
def capped(k8s_cluster: Cluster, postgres_dsn, workdir: Path):
    h.apply_crd(k8s_cluster)
    op = h.Operator(k8s_cluster, postgres_dsn.url, workdir, drain_s=3.0).start()
    assert op.proc is not None
    cap = MemoryCap.around(op.proc.popen.pid, CHART_LIMIT)
    yield op, cap
    hwm = next(
        (
            line.split()[1]
            for line in Path(f"/proc/{op.proc.popen.pid}/status").read_text().splitlines()
            if line.startswith("VmHWM:")
        ),
        "?",
    )
    print(f"\noperator peak: {cap.peak() / 2**20:.0f} MiB charged to its cgroup, VmHWM {hwm} kB")
    op.stop()
    cap.remove()


def _good(t0: int, n: int = 50) -> Batch:
    """What a real agent sends in one poll: samples and short kernels on the node's clock."""
    return Batch(
        samples=tuple(CpuSample(t0 + i * 10_000_000, 7, 7, "python", 0, STACK) for i in range(n)),
        gpu_activities=tuple(
            GpuActivity(
                "kernel", "_Z4gemmv", t0 + i * 1_000_000, t0 + i * 1_000_000 + 400_000, 0, 7, i + 1
            )
            for i in range(10)
        ),
    )


def _post(
    op: h.Operator, ns: str, name: str, token: str, node: str, batch: Batch, bid: str
) -> tuple[int, str, int]:
    body = encode(batch, batch_id=bid, node=node)
    ans = IngestClient(op.url, ns, name, token).post_batch(body, bid)
    return ans.status, ans.detail, len(body)


def test_span_batches_are_refused_and_an_innocent_session_is_stored(
    k8s_cluster: Cluster, postgres_dsn, capped, workdir: Path
):
    op, cap = capped
    c = k8s_cluster
    ns = f"e2e-span-{uuid.uuid4().hex[:6]}"
    c.kubectl("create", "namespace", ns)
    try:
        c.kubectl("apply", "-f", "-", stdin=h.deployment_yaml("trainer", ns))
        pod = h.poll(lambda: h.running_pods(c, ns, "trainer"), 60, "trainer pod Running")[0]
        node = pod["spec"]["nodeName"]
        for name in ("attacker", "innocent"):
            c.kubectl("apply", "-f", "-", stdin=h.session_yaml(name, ns, "trainer", "40s"))
        for name in ("attacker", "innocent"):
            h.poll(lambda n=name: h.phase(c, ns, n) == "Running", 60, f"{name} Running")
        bad_tok, good_tok = (h.session_token(c, ns, n) for n in ("attacker", "innocent"))

        t0 = time.monotonic_ns()
        assert _post(op, ns, "innocent", good_tok, node, _good(t0), "i-1")[0] == 200

        # The red team's batches, from the attacker session's own agent token.
        span115 = Batch(
            gpu_activities=(GpuActivity("kernel", "k", t0, t0 + 115 * DAY_NS, 0, 7, 1),)
        )
        huge = Batch(gpu_activities=(GpuActivity("kernel", "k", 0, 2**63 - 1, 0, 7, 2),))
        answers = {
            "115-day kernel": _post(op, ns, "attacker", bad_tok, node, span115, "a-1"),
            "2^63-1 ns kernel": _post(op, ns, "attacker", bad_tok, node, huge, "a-2"),
        }
        first = Batch(gpu_activities=(GpuActivity("kernel", "k", t0, t0 + 1, 0, 7, 3),))
        assert _post(op, ns, "attacker", bad_tok, node, first, "a-3")[0] == 200
        later = Batch(
            gpu_activities=(
                GpuActivity("kernel", "k", t0 + 115 * DAY_NS, t0 + 115 * DAY_NS + 1, 0, 7, 4),
            )
        )
        answers["1 ns kernel 115 days later"] = _post(
            op, ns, "attacker", bad_tok, node, later, "a-4"
        )
        print(f"\nbody sizes: { {k: v[2] for k, v in answers.items()} }")
        for what, (status, detail, _size) in answers.items():
            assert status == 422, (what, status, detail)
            assert "gpu_activities[0].end_ns" in detail, (what, detail)

        assert _post(op, ns, "innocent", good_tok, node, _good(t0 + 5_000_000_000), "i-2")[0] == 200
        assert op.proc is not None and op.proc.alive(), op.proc.text()[-3000:]

        for name in ("attacker", "innocent"):
            h.poll(
                lambda n=name: h.phase(c, ns, n) in ("Completed", "Failed"), 150, f"{name} ended"
            )
        assert op.proc.alive() and cap.oom_kills() == 0, op.proc.text()[-3000:]
        innocent = h.session(c, ns, "innocent")["status"]
        attacker = h.session(c, ns, "attacker")["status"]
        assert innocent["phase"] == attacker["phase"] == "Completed", (innocent, attacker)
        assert innocent["samples"] == 100
        # What each stored, against the per-session quota (refused batches count nothing).
        limits = {"maxRecords": 100_000_000, "maxFrames": 500_000, "maxStacks": 1_000_000}
        # the innocent session's first batch added the one frame and stack both use
        assert innocent["quota"] == {"records": 120, "frames": 1, "stacks": 1, **limits}
        assert attacker["quota"] == {"records": 1, "frames": 0, "stacks": 0, **limits}
        with psycopg.connect(postgres_dsn.libpq) as conn:
            sid = conn.execute(
                "SELECT id FROM sessions WHERE name = %s", (attacker["storeSession"],)
            ).fetchone()[0]
            kept = conn.execute(
                "SELECT max(end_ns - start_ns), count(*) FROM gpu_activities WHERE session_id = %s",
                (sid,),
            ).fetchone()
            batches = [
                r[0]
                for r in conn.execute(
                    "SELECT batch_id FROM ingested_batches WHERE session_id = %s", (sid,)
                )
            ]
            innocent_sid = conn.execute(
                "SELECT id FROM sessions WHERE name = %s", (innocent["storeSession"],)
            ).fetchone()[0]
            innocent_kernels = conn.execute(
                "SELECT count(*) FROM gpu_activities WHERE session_id = %s", (innocent_sid,)
            ).fetchone()[0]
        assert kept == (1, 1) and batches == ["a-3"], (kept, batches)
        assert innocent_kernels == 20

        # Item 3: records spanning 11.6 days and 2^63-1 ns, stored before these bounds
        # existed, are viewed through the operator's API within its memory limit.
        store = Store.open(postgres_dsn.url)
        try:
            BatchWriter(store.engine).store(
                sid,
                "stored-before-bounds",
                node,
                Batch(
                    gpu_activities=(
                        GpuActivity("kernel", "k", t0, t0 + int(11.6 * DAY_NS), 0, 7, 9),
                        GpuActivity("kernel", "k", 0, 2**63 - 1, 0, 7, 10),
                    )
                ),
            )
        finally:
            store.close()
        for path in (
            f"/api/v1/sessions/{ns}/attacker",
            f"/api/v1/sessions/{ns}/attacker/flamegraph?view=gpu",
            f"/api/v1/sessions/{ns}/attacker/flamegraph?view=cpu&from=0&to=40",
        ):
            with urlopen(op.url + path, timeout=300) as r:
                assert r.status == 200, path
                json.load(r)
            assert op.proc.alive() and cap.oom_kills() == 0, (path, op.proc.text()[-3000:])
        with urlopen(op.url + "/healthz", timeout=10) as r:
            assert r.read() == b"ok"
    finally:
        c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
