"""A cluster session from two nodes: a timeline draws one node, never both on one axis.

Each node's pids and CLOCK_MONOTONIC are its own. Here both nodes run a pid 7 with a
thread 7, at clocks ~1,000 s apart; drawn together, the two processes became one track
and the two clocks one axis."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime

import jsonschema
import pytest

from kubeprof.model import Batch, CpuSample, Frame, FrameKind, GpuActivity, ProcessInfo
from kubeprof.reporting import NodeChoice, report_command, timeline_command
from kubeprof.storage import Store, sessions
from kubeprof.ui.routes import Routes
from tests.unit.report.trace_schema import SCHEMA

PATH = "/api/v1/sessions/team-b/serve/timeline"
STACK = (Frame("main", FrameKind.PYTHON, "/app/s.py", 1),)
CLOCK = {"node-a": 10**9, "node-b": 1_000 * 10**9}  # each node's own monotonic clock


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return two_node_store(f"sqlite:///{tmp_path_factory.mktemp('nodes') / 'kp.db'}")


def two_node_store(url: str) -> str:
    """Session team-b/serve: 20 samples from node-a, 5 and a kernel from node-b, both of
    pid 7, at each node's own clock (also the browser test's store)."""
    store = Store.open(url)
    with store.engine.begin() as conn:
        sid = sessions.ensure(
            conn,
            "team-b/serve@00aa",
            kind="cluster",
            command="ProfilingSession team-b/serve",
            hz=99,
            started_at=datetime.now(UTC),
        )
    for node, t0 in CLOCK.items():
        n = 20 if node == "node-a" else 5
        store.write_batch(
            sid,
            Batch(
                samples=tuple(CpuSample(t0 + i * 10**7, 7, 7, node, 0, STACK) for i in range(n)),
                processes=(ProcessInfo(7, 1, f"serve-{node}", "python3 s.py"),),
                gpu_activities=(
                    (GpuActivity("kernel", "gemm", t0, t0 + 5_000, 0, 7, 1),)
                    if node == "node-b"
                    else ()
                ),
            ),
            node=node,
        )
    store.finish_session(sid, status="Completed")
    store.close()
    return url


def _threads(trace: dict) -> dict[str, int]:
    """Thread name -> the number of its CPU slices."""
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    out: dict[str, int] = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "B" and e.get("cat") == "cpu":
            name = names[(e["pid"], e["tid"])]
            out[name] = out.get(name, 0) + 1
    return out


def test_the_cli_asks_which_node_and_names_them(url, tmp_path):
    with pytest.raises(NodeChoice) as err:
        timeline_command(url, "team-b/serve", str(tmp_path / "t.json"))
    msg = str(err.value)
    assert "2 nodes ('node-a', 'node-b')" in msg and "--node NAME" in msg, msg
    assert not (tmp_path / "t.json").exists()
    with pytest.raises(NodeChoice, match=r"^node: .*no records from node 'node-c'.*node-a"):
        timeline_command(url, "team-b/serve", str(tmp_path / "t.json"), node="node-c")


def test_one_nodes_timeline_holds_that_node_only(url, tmp_path):
    out = tmp_path / "b.json"
    assert timeline_command(url, "team-b/serve", str(out), node="node-b") == 0
    trace = json.loads(out.read_text())
    jsonschema.validate(trace, SCHEMA)
    assert _threads(trace) == {"node-b [7]": 1}  # 5 samples of one stack: one slice
    procs = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert "serve-node-b" in procs and "serve-node-a" not in procs
    assert sum(e.get("cat") == "kernel" for e in trace["traceEvents"]) == 1
    a = tmp_path / "a.json"
    assert timeline_command(url, "team-b/serve", str(a), node="node-a") == 0
    trace_a = json.loads(a.read_text())
    assert _threads(trace_a) == {"node-a [7]": 1}
    assert not any(e.get("cat") == "kernel" for e in trace_a["traceEvents"])
    # node-a's 200 ms of samples, not 1,000 s of two clocks on one axis
    ts = [e["ts"] for e in trace_a["traceEvents"] if e.get("cat") == "cpu"]
    assert max(ts) - min(ts) < 10**6, ts


def test_node_is_refused_for_the_formats_that_cover_every_node(url):
    with pytest.raises(LookupError, match=r"^--node: only the timeline"):
        report_command("team-b/serve", "text", "cpu", "-", url, node="node-a")


def test_the_web_ui_offers_a_timeline_per_node(url):
    store = Store.open(url)
    try:
        routes = Routes(store.engine)
        resp = routes.handle("GET", PATH, {})
        assert resp.status == 400
        assert "'node-a', 'node-b'" in json.loads(resp.body)["message"]
        resp = routes.handle("GET", PATH, {"node": "node-b"})
        summary = routes.handle("GET", "/api/v1/sessions/team-b/serve", {})
    finally:
        store.close()
    assert resp.status == 200
    assert resp.headers["Content-Disposition"] == (
        'attachment; filename="team-b_serve.node-b.trace.json.gz"'
    )
    assert _threads(json.loads(gzip.decompress(resp.body))) == {"node-b [7]": 1}
    assert json.loads(summary.body)["nodes"] == ["node-a", "node-b"]
