"""Per-session quotas on the shared frame and stack tables, shown in the CR (issue 32).

A real `kubeprof operator` on the real control plane and PostgreSQL, started with small
`--ingest-max-session-stacks/-frames`. A session's batches that add stacks past its limit
are refused 413 naming the kind and the flag, and nothing of them is stored; stacks it
added before cost it nothing to use again; `.status.quota` shows used and limit per kind
(records, frames, stacks), `kubectl get -o wide` the Records and Stacks columns; an
operator restarted mid-session still knows what the session added. Deleted while
Running, the session is marked `deleted` in the database.
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

FLAGS = ("--ingest-max-session-stacks", "5", "--ingest-max-session-frames", "100")
LIMITS = {"maxRecords": 100_000_000, "maxFrames": 100, "maxStacks": 5}


def _stacks(t0: int, names: list[str]) -> Batch:
    """One sample per name, each on a stack of its own: `main` (shared) above `name`."""
    return Batch(
        samples=tuple(
            CpuSample(
                t0 + i * 10_000_000,
                7,
                7,
                "python",
                0,
                (Frame("main", FrameKind.PYTHON, "/train.py", 1), Frame(n, FrameKind.PYTHON)),
            )
            for i, n in enumerate(names)
        )
    )


def _post(op: h.Operator, ns: str, token: str, node: str, batch: Batch, bid: str):
    ans = IngestClient(op.url, ns, "quota", token).post_batch(
        encode(batch, batch_id=bid, node=node), bid
    )
    return ans.status, ans.detail


def _counts(dsn: str, store_session: str) -> tuple[int, int, int, list[str]]:
    """Shared stacks and frames, the session's samples and stored batch ids."""
    with psycopg.connect(dsn) as conn:
        sid = conn.execute("SELECT id FROM sessions WHERE name = %s", (store_session,)).fetchone()[
            0
        ]
        one = lambda sql, *a: conn.execute(sql, a).fetchone()[0]  # noqa: E731
        return (
            one("SELECT count(*) FROM stacks"),
            one("SELECT count(*) FROM frames"),
            one("SELECT count(*) FROM samples WHERE session_id = %s", sid),
            sorted(
                r[0]
                for r in conn.execute(
                    "SELECT batch_id FROM ingested_batches WHERE session_id = %s", (sid,)
                )
            ),
        )


def _db_status(dsn: str, store_session: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT status FROM sessions WHERE name = %s", (store_session,))
        return str(row.fetchone()[0])


def test_stacks_past_the_session_quota_are_refused_whole_and_the_status_shows_it(
    k8s_cluster: Cluster, postgres_dsn
):
    c = k8s_cluster
    h.apply_crd(c)
    workdir = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-quota-"))
    op = h.Operator(c, postgres_dsn.url, workdir, args=FLAGS).start()
    ns = f"e2e-quota-{uuid.uuid4().hex[:6]}"
    c.kubectl("create", "namespace", ns)
    try:
        node, token = h.running_session(c, ns, "quota", "300s")
        t0 = time.monotonic_ns()

        assert _post(op, ns, token, node, _stacks(t0, ["a", "b", "c"]), "b-1")[0] == 200
        want = {"records": 3, "frames": 4, "stacks": 3, **LIMITS}  # "main" + a, b, c
        h.poll(
            lambda: h.session(c, ns, "quota").get("status", {}).get("quota") == want,
            30,
            f".status.quota == {want}",
        )
        store_session = h.session(c, ns, "quota")["status"]["storeSession"]
        before = _counts(postgres_dsn.libpq, store_session)
        assert before == (3, 4, 3, ["b-1"]), before

        status, detail = _post(op, ns, token, node, _stacks(t0, ["d", "e", "f"]), "b-2")
        assert status == 413, (status, detail)
        assert detail.startswith(f"stacks: session {ns}/quota added 3 stacks"), detail
        assert "would pass the limit of 5 per session (--ingest-max-session-stacks)" in detail
        assert _counts(postgres_dsn.libpq, store_session) == before  # nothing half-stored

        # Its own stacks again: no new row, so no quota spent.
        assert _post(op, ns, token, node, _stacks(t0, ["a", "b", "c"] * 10), "b-3")[0] == 200
        want = {**want, "records": 33}
        h.poll(lambda: h.session(c, ns, "quota")["status"].get("quota") == want, 30, "33")
        wide = c.kubectl("get", "profilingsession", "quota", "-n", ns, "-o", "wide").stdout
        header, row = wide.splitlines()[:2]
        assert "RECORDS" in header.split() and "STACKS" in header.split(), wide
        # columns start where their header does (other values hold spaces)
        col = {k: row[header.index(f" {k} ") + 1 :].split()[0] for k in ("RECORDS", "STACKS")}
        assert col == {"RECORDS": "33", "STACKS": "3"}, wide

        # Restarted mid-session, the operator reads what the session added back.
        op.stop()
        op = h.Operator(c, postgres_dsn.url, workdir, args=FLAGS).start()
        status, detail = h.poll(
            lambda: (
                r
                if (r := _post(op, ns, token, node, _stacks(t0, ["d", "e", "f"]), "b-4"))[0] != 503
                else None
            ),
            90,
            "an answer other than 'operator starting'",
        )
        assert status == 413 and "--ingest-max-session-stacks" in detail, (status, detail)
        assert _post(op, ns, token, node, _stacks(t0, ["d", "e"]), "b-5")[0] == 200
        want = {**want, "records": 35, "frames": 6, "stacks": 5}
        h.poll(lambda: h.session(c, ns, "quota")["status"].get("quota") == want, 30, "5 of 5")
        assert _counts(postgres_dsn.libpq, store_session) == (5, 6, 35, ["b-1", "b-3", "b-5"])

        # Deleted while Running, it is not left "running" in the database (issue 32, item 6).
        assert _db_status(postgres_dsn.libpq, store_session) == "running"
        c.kubectl("delete", "profilingsession", "quota", "-n", ns)
        h.poll(
            lambda: _db_status(postgres_dsn.libpq, store_session) == "deleted",
            60,
            "sessions.status 'deleted'",
        )
    finally:
        c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        op.stop()
