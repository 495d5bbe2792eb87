"""The web UI's JSON API through its routes, on a real SQLite store of H200 recordings."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kubeprof.storage import Store
from kubeprof.ui.routes import Routes
from kubeprof.ui.server import make_server

KUBEPROF = str(Path(sys.executable).parent / "kubeprof")


@pytest.fixture
def routes(ui_store: str):
    store = Store.open(ui_store)
    yield Routes(store.engine)
    store.close()


def get(routes: Routes, path: str, **query: str) -> tuple[int, dict]:
    resp = routes.handle("GET", path, query)
    return resp.status, json.loads(resp.body)


def test_sessions_list_names_local_and_cluster_sessions(routes):
    status, data = get(routes, "/api/v1/sessions")
    assert status == 200
    by = {(s["namespace"], s["name"]): s for s in data["sessions"]}
    assert set(by) == {("local", "pageable"), ("local", "pageable_pinned"), ("team-a", "train")}
    train = by[("team-a", "train")]
    assert (train["phase"], train["nodes"], train["pods"], train["samples"]) == (
        "Completed",
        1,
        2,
        35,
    )
    assert by[("local", "pageable")]["samples"] == 918  # the recording's CPU samples


def test_summary_has_the_findings_and_top_function(routes):
    status, s = get(routes, "/api/v1/sessions/local/pageable")
    assert status == 200
    kinds = [f["kind"] for f in s["findings"]]
    assert "pageable_memcpy" in kinds
    assert s["topFunctions"][0]["function"].startswith("copy_batch")  # the workload's hot spot
    assert s["topKernels"][0]["function"].startswith("memcpy HtoD")
    assert "kp-finding" in s["html"]["findings"]  # the HTML report's own rendering
    assert s["timeline"]["busy"] and 0 <= max(s["timeline"]["busy"]) <= 1
    labels = [k for k, _ in s["header"]]
    assert not [k for k in labels if k.startswith("counter.") or k in ("cpu", "gpu")]


def test_flame_graph_narrows_to_a_pod_and_keeps_secrets_out(routes):
    _, whole = get(routes, "/api/v1/sessions/team-a/train/flamegraph", view="cpu")
    _, pod = get(routes, "/api/v1/sessions/team-a/train/flamegraph", view="cpu", pod="train-1")
    v_whole, v_pod = whole["views"]["cpu"], pod["views"]["cpu"]
    assert v_whole["samples"][0] == 35 and v_pod["samples"][0] == 5
    assert "step (t.py:9)" not in v_pod["names"]
    _, summary = get(routes, "/api/v1/sessions/team-a/train")
    assert "must-not-leak" not in json.dumps(summary)
    assert [p["name"] for p in summary["pods"]] == ["train-0", "train-1"]


def test_time_range_is_rounded_to_whole_buckets(routes):
    status, fg = get(
        routes, "/api/v1/sessions/local/pageable/flamegraph", view="cpu", **{"from": "1", "to": "2"}
    )
    assert status == 200
    lo, hi = fg["range"]
    assert lo <= 1 and hi >= 2 and (hi - lo) >= 1
    assert 0 < fg["views"]["cpu"]["samples"][0] <= 918


def test_diff_colours_the_function_that_got_slower(routes):
    status, d = get(routes, "/api/v1/diff", base="local/pageable_pinned", new="local/pageable")
    assert status == 200
    v = d["views"]["cpu"]
    share = {}
    for i, nm in enumerate(v["name"]):
        label = v["names"][nm]
        if label.startswith("copy_batch"):
            after = (v["value"][i] - v["base"][i]) / v["newTotal"]
            before = v["base"][i] / v["baseTotal"]
            share[label] = share.get(label, 0) + after - before
    assert share and max(share.values()) > 0.05  # copies took a larger share when pageable


def test_diff_numbers_are_the_clis_json_and_the_flame_graph_counts_the_same(routes, ui_store):
    cli = subprocess.run(
        [KUBEPROF, "diff", "pageable_pinned", "pageable", "-f", "json", "--store", ui_store],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 0, cli.stderr
    query = {"base": "local/pageable_pinned", "new": "local/pageable"}
    status, numbers = get(routes, "/api/v1/diff/numbers", **query)
    assert status == 200 and numbers == json.loads(cli.stdout)
    # the differential flame graph is drawn over the stacks those numbers count
    for view, table in (("cpu", 0), ("gpu", 1)):
        _, fg = get(routes, "/api/v1/diff", view=view, **query)
        v = fg["views"][view]
        drawn = [v["baseTotal"] * v["scale"] / 1e9, v["newTotal"] * v["scale"] / 1e9]
        assert drawn == pytest.approx(numbers["tables"][table]["whole_s"], rel=1e-6), view


@pytest.mark.parametrize(
    ("path", "query", "status", "words"),
    [
        ("/api/v1/sessions/local/nope", {}, 404, "no session local/nope"),
        ("/api/v1/sessions/local/pageable/flamegraph", {"view": "disk"}, 400, "view='disk'"),
        ("/api/v1/sessions/local/pageable/flamegraph", {"from": "soon"}, 400, "from='soon'"),
        ("/api/v1/diff", {"base": "pageable"}, 400, "NAMESPACE/NAME"),
        ("/api/v1/sessions/team-a/train/flamegraph", {"gpu": "x"}, 400, "gpu='x'"),
        (
            "/api/v1/diff/numbers",
            {"base": "local/pageable", "new": "local/pageable_pinned", "sort": "size"},
            400,
            "sort='size': expected self or total",
        ),
        ("/api/v1/sessions/local/pageable", {"keep-interpreter": "yes"}, 400, "expected 1"),
    ],
)
def test_bad_requests_say_what_to_change(routes, path, query, status, words):
    code, body = get(routes, path, **query)
    assert code == status and words in body["message"]


def test_read_only_and_locked_down():
    routes = Routes(engine=None)  # type: ignore[arg-type] - refused before any query
    resp = routes.handle("POST", "/api/v1/sessions", {})
    assert resp.status == 405 and b"read-only" in resp.body
    page = routes.handle("GET", "/sessions/local/pageable", {})
    assert page.status == 200 and b"/static/app.js" in page.body
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    assert routes.handle("GET", "/static/../../etc/passwd", {}).status == 404


def test_kubeprof_ui_server_answers_over_http(ui_store):
    store = Store.open(ui_store)
    server = make_server(Routes(store.engine), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        with urllib.request.urlopen(base + "/api/v1/sessions", timeout=30) as r:
            assert r.headers["Content-Type"] == "application/json"
            assert len(json.load(r)["sessions"]) == 3
        req = urllib.request.Request(base + "/api/v1/sessions", method="DELETE")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=30)
        assert err.value.code == 405
    finally:
        server.shutdown()
        server.server_close()
        store.close()


def test_kubeprof_ui_names_a_bad_listen_flag(capsys):
    from kubeprof import cli

    assert cli.main(["ui", "--listen", "localhost"]) == 2
    assert "--listen wants HOST:PORT, got 'localhost'" in capsys.readouterr().err


def test_kubeprof_ui_says_when_the_port_is_taken(ui_store, capsys):
    import socket

    from kubeprof import cli

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli.main(["ui", "--store", ui_store, "--listen", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "--listen" in err


def test_gpu_narrows_both_views_to_that_device(routes):
    _, s = get(routes, "/api/v1/sessions/local/pageable")
    assert [g["id"] for g in s["gpus"]] == ["0"]
    path = "/api/v1/sessions/local/pageable/flamegraph"
    _, cpu0 = get(routes, path, view="cpu", gpu="0")
    _, cpu1 = get(routes, path, view="cpu", gpu="1")
    _, gpu0 = get(routes, path, view="gpu", gpu="0")
    _, gpu_all = get(routes, path, view="gpu")
    assert cpu0["views"]["cpu"]["samples"][0] == 918  # the one process used GPU 0
    assert cpu1["stacks"] == 0 and gpu0["views"]["gpu"]["value"] == gpu_all["views"]["gpu"]["value"]
