"""The H200 agent proof's request bodies posted again to the real ingest API over PostgreSQL.

tests/fixtures/gpu/agent_proof holds every body a real ``kubeprof agent`` posted on the H200
(injected pods switched dormant -> on -> dormant). Here each goes over HTTP to the operator's
ingest API, as the agent sent it, into PostgreSQL; the operator's aggregation and its
``.status`` then give each pod its own CUPTI figure (the pod without a tracer its NVML one,
labelled) within a few points of what each workload measured on itself.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeprof.agent.cluster.client import IngestClient
from kubeprof.operator import aggregate
from kubeprof.operator.targets import Target
from kubeprof.protocol import codec
from kubeprof.storage import Store
from tests.e2e import ingest_server
from tests.gpu import proof_check

pytestmark = pytest.mark.e2e

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "agent_proof"
NS, NODE, TOKEN = "proof", "h200-node", "tok-proof"


@pytest.fixture(scope="module")
def store(postgres_dsn) -> Iterator[Store]:
    s = Store.open(postgres_dsn.url)
    yield s
    s.close()


@pytest.mark.parametrize("phase", ["single", "shared", "graph"])
def test_agent_bodies_through_the_ingest_api_give_each_pod_its_own_idle(store, phase) -> None:
    with gzip.open(FIX / f"{phase}.json.gz", "rt") as f:
        meta = json.load(f)
    srv = ingest_server.start(store.engine)
    try:
        name = f"{phase}-replay"
        entry = srv.add_session(
            store.engine,
            NS,
            name,
            TOKEN,
            [Target(p["uid"], pod, NS, NODE) for pod, p in meta["pods"].items()],
        )
        client = IngestClient(srv.url, NS, name, TOKEN)
        for body in proof_check.read_batches(FIX / f"{phase}.batches.jsonl.gz"):
            batch_id = json.loads(body)["batch_id"]
            ans = client.post_batch(gzip.compress(body), batch_id)
            assert ans.status == 200, (ans.status, ans.detail)
    finally:
        srv.stop()
    with store.engine.begin() as conn:
        s = aggregate.aggregate(conn, entry.db_id)
        status = aggregate.status_summary(
            s, {p["uid"]: f"{NS}/{pod}" for pod, p in meta["pods"].items()}
        )
        reports = {
            pod: proof_check.pod_report(conn, entry.db_id, p["uid"])
            for pod, p in meta["pods"].items()
        }
    shown = {p["name"]: p for p in status["summary"]["pods"]}
    for pod, p in meta["pods"].items():
        rep, row = reports[pod], shown[f"{NS}/{pod}"]
        # The device's own aggregation over PostgreSQL printed `device_idle` before issue 26
        # gave kubeprof one idle definition: CUPTI pods now count copies/memsets busy too
        # (idle can only drop, and by little: no copy loop here); NVML pods use the light
        # agent's definition, which must be no further from the pod's own measurement.
        device_idle = p["device_report"]["gpu_idle"]
        if p["injected"]:
            assert device_idle - 0.01 <= rep["gpu_idle"] <= device_idle + 1e-9
        else:
            own_idle = p["truth"]["idle_ratio"]
            assert abs(rep["gpu_idle"] - own_idle) <= abs(device_idle - own_idle) + 1e-9
        assert row["gpuIdleSource"] == ("cupti" if p["injected"] else "nvml")
        if p["injected"]:
            assert rep["kernels"] > 300 and rep["kernel_pids"] == [p["truth"]["pid"]]
            own = proof_check.truth_over(p["truth"]["steps"], *rep["window"])
            assert own is not None and abs(rep["gpu_idle"] - own) <= 0.03
            assert row["gpuIdle"] == f"{rep['gpu_idle']:.0%}"


def test_fixture_bodies_name_the_node_and_carry_batch_ids() -> None:
    """What the test above relies on: every body decodes as the ingest decodes it."""
    for phase in ("single", "shared", "graph"):
        for body in proof_check.read_batches(FIX / f"{phase}.batches.jsonl.gz"):
            batch_id, node, _ = codec.decode(body)
            assert node == NODE and batch_id
