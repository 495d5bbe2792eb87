"""`kubeprof report -f perfetto` opened in a trace viewer in headless Chromium: speedscope
(MIT; its release files come from the npm registry's `speedscope` package into .cache/ on
first use) imports Chrome trace-event JSON. Every track must import, without one slice
ended out of order. The screenshot is docs/images/timeline.png's source
(KUBEPROF_DOCS_SHOTS=docs/images refreshes it)."""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.report.truth_store import store_fixture

KUBEPROF = str(Path(sys.executable).parent / "kubeprof")
VERSION = "1.25.0"
CACHE = Path(__file__).resolve().parents[2] / ".cache" / f"speedscope-{VERSION}"


@pytest.fixture(scope="module")
def speedscope() -> Path:
    """speedscope's release folder (index.html and its assets)."""
    release = CACHE / "package" / "dist" / "release"
    if not (release / "index.html").exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed: speedscope cannot be fetched")
        CACHE.mkdir(parents=True, exist_ok=True)
        got = subprocess.run(
            [npm, "pack", f"speedscope@{VERSION}"],
            cwd=CACHE,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if got.returncode != 0:
            pytest.skip(f"npm pack speedscope@{VERSION} failed: {got.stderr.strip()[-200:]}")
        with tarfile.open(CACHE / f"speedscope-{VERSION}.tgz") as tar:
            members = [
                m
                for m in tar.getmembers()
                if m.isfile() and m.name.startswith("package/") and ".." not in m.name
            ]
            tar.extractall(CACHE, members=members)  # 3.11.2 has no filter="data"
    return release


@pytest.fixture
def served(speedscope: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "www"
    shutil.copytree(speedscope, root)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *_: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", root
    server.shutdown()
    server.server_close()


def test_the_timeline_opens_in_a_trace_viewer(browser, served, tmp_path, shots):
    base, root = served
    url = f"sqlite:///{tmp_path}/t.db"
    store_fixture(url, "train_torch")
    run = subprocess.run(
        [
            KUBEPROF,
            "report",
            "train_torch",
            "-f",
            "perfetto",
            "--out",
            str(root / "t.json"),
            "--store",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    trace = json.loads((root / "t.json").read_text())
    tracks = {(e["pid"], e["tid"]) for e in trace["traceEvents"] if e["ph"] in "BEX"}
    browser.goto(f"{base}/index.html#profileURL={base}/t.json&title=timeline")
    browser.wait("document.body.innerText.includes('timeline (1/')", timeout=120)
    browser.eval("1")  # collect the console messages logged meanwhile
    log = "\n".join(browser.console)
    assert "Importing as Trace Event Format profile" in log, log
    assert "Tried to end" not in log and "still open" not in log, log
    # One profile per track: "timeline (1/N)" in the toolbar.
    assert f"timeline (1/{len(tracks)})" in browser.eval("document.body.innerText")
    browser.screenshot(shots / "timeline.png")
    if os.environ.get("KUBEPROF_DOCS_SHOTS"):
        browser.screenshot(Path(os.environ["KUBEPROF_DOCS_SHOTS"]) / "timeline.png")
