"""A session stuck in a failing step ends (issue 32, item 1's second half).

A real `kubeprof operator` on the real control plane and PostgreSQL. The database refuses
every row of the session-end aggregation (a CHECK constraint on `session_aggregates`, as a
bug or bad data would make the step fail each time, not an outage): after the retry budget
(`aggregation_attempts`, 3) the session is Failed with reason AggregationFailed and the
error in its Completed condition, its agent DaemonSet and token Secret are removed, and
the database row says `failed` instead of staying `running`. Before issue 32 such a session
stayed Aggregating for ever, retried every 60 s.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from kubeprof.agent.cluster.client import IngestClient
from kubeprof.model import Batch, CpuSample, Frame, FrameKind
from kubeprof.protocol.codec import encode
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.e2e


def test_an_aggregation_the_database_keeps_refusing_ends_failed_and_cleaned_up(
    k8s_cluster: Cluster, postgres_dsn
):
    c = k8s_cluster
    h.apply_crd(c)
    workdir = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-stuck-"))
    op = h.Operator(c, postgres_dsn.url, workdir, drain_s=2.0).start()
    ns = f"e2e-stuck-{uuid.uuid4().hex[:6]}"
    c.kubectl("create", "namespace", ns)
    try:
        node, token = h.running_session(c, ns, "stuck", "8s")
        assert h.get_json(c, "get", "ds", "-n", ns, "kubeprof-stuck-agent") is not None
        stack = (Frame("train_step", FrameKind.PYTHON, "/app/train.py", 12),)
        batch = Batch(samples=(CpuSample(time.monotonic_ns(), 7, 7, "python", 0, stack),))
        ans = IngestClient(op.url, ns, "stuck", token).post_batch(
            encode(batch, batch_id="b-1", node=node), "b-1"
        )
        assert ans.status == 200, ans.detail
        with psycopg.connect(postgres_dsn.libpq, autocommit=True) as conn:
            conn.execute(
                "ALTER TABLE session_aggregates ADD CONSTRAINT e2e_refuse_all CHECK (false) "
                "NOT VALID"
            )

        status = h.poll(
            lambda: (
                (s := h.session(c, ns, "stuck").get("status", {})).get("phase") == "Failed" and s
            ),
            180,
            "stuck Failed",
        )
        assert status["reason"] == "AggregationFailed", status
        assert status["aggregationFailures"] == 3, status
        completed = {x["type"]: x for x in status["conditions"]}["Completed"]
        assert (completed["status"], completed["reason"]) == ("False", "AggregationFailed")
        assert "aggregation failed 3 times" in completed["message"], completed
        assert "e2e_refuse_all" in completed["message"] or "check" in completed["message"].lower()
        h.poll(
            lambda: (
                h.get_json(c, "get", "ds", "-n", ns, "kubeprof-stuck-agent") is None
                and h.get_json(c, "get", "secret", "-n", ns, "kubeprof-stuck-ingest") is None
            ),
            60,
            "agent DaemonSet and token Secret removed",
        )
        with psycopg.connect(postgres_dsn.libpq) as conn:
            row = conn.execute(
                "SELECT status FROM sessions WHERE name = %s", (status["storeSession"],)
            ).fetchone()
        assert row is not None and row[0] == "failed", row
    finally:
        c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        op.stop()
