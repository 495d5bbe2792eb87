"""The session page's "keep CPython's frames" box is `kubeprof report --keep-interpreter`:
off, the page's top function is the Python function the text report names first; on (the
URL says keep-interpreter=1), it is CPython's own C function, as the CLI's with the flag.

The session is written through the store as the BPF sampler writes one (Python frames
interleaved with python3.11's own); tests/integration/test_ui_one_truth.py records one."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

from kubeprof.model import Batch, CpuSample, Frame, FrameKind, ProcessInfo
from kubeprof.storage import Store
from kubeprof.ui.routes import Routes
from kubeprof.ui.server import make_server

KUBEPROF = str(Path(sys.executable).parent / "kubeprof")
PY = "/usr/bin/python3.11"
TOP = "document.querySelector('.kp-topfn tbody td:last-child')"


def _py(name: str, line: int) -> Frame:
    return Frame(name, FrameKind.PYTHON, "/app/phases.py", line)


def _c(name: str) -> Frame:
    return Frame(name, FrameKind.NATIVE, PY)


def _store(url: str) -> None:
    root = (_c("_start"), _c("Py_BytesMain"), _py("<module>", 20), _c("_PyEval_EvalFrameDefault"))
    regex = (*root, _py("extract_regex", 12), _c("_sre_SRE_Pattern_findall"), _c("sre_ucs1_count"))
    alpha = (*root, _py("count_alpha", 15), _c("_PyUnicode_IsAlpha"))
    samples = [CpuSample(10**9 + i * 10**7, 7, 7, "python3", 0, regex) for i in range(60)]
    samples += [CpuSample(2 * 10**9 + i * 10**7, 7, 7, "python3", 0, alpha) for i in range(40)]
    store = Store.open(url)
    sid = store.create_session("phases", command="python3 phases.py", hz=99, start_ns=10**9)
    store.write_batch(
        sid,
        Batch(samples=tuple(samples), processes=(ProcessInfo(7, 1, "python3", "python3"),)),
    )
    store.finish_session(sid, end_ns=3 * 10**9)
    store.close()


def _first_self_row(url: str, *flags: str) -> str:
    text = subprocess.run(
        [KUBEPROF, "report", "phases", "--store", url, "--width", "0", *flags],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    table = text.split("Top functions by self time", 1)[1]
    return re.search(r"^\s*[\d.]+%\s+[\d.]+%\s+[\d.]+ \w+\s+(.+)$", table, re.M)[1]


def test_keep_interpreter_box_is_the_clis_flag(browser, tmp_path, shots):
    url = f"sqlite:///{tmp_path}/i.db"
    _store(url)
    store = Store.open(url)
    server = make_server(Routes(store.engine), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page = f"http://127.0.0.1:{server.server_port}/sessions/local/phases"
        browser.goto(page, f"{TOP} !== null")
        folded = _first_self_row(url)
        assert folded == "extract_regex (phases.py)"
        assert browser.eval(f"{TOP}.textContent") == folded
        assert not browser.eval("document.getElementById('kp-keep-interpreter').checked")

        browser.eval("document.getElementById('kp-keep-interpreter').click()")
        browser.wait("location.search.includes('keep-interpreter=1')")
        browser.wait(f"{TOP} !== null && {TOP}.textContent !== {folded!r}")
        kept = _first_self_row(url, "--keep-interpreter")
        assert kept == "sre_ucs1_count"
        assert browser.eval(f"{TOP}.textContent") == kept
        assert browser.eval("document.getElementById('kp-keep-interpreter').checked")
        title = browser.eval("document.querySelector('.kp-tops h2').textContent")
        assert title == "Top functions (CPU, self time, CPython's frames kept)"
        browser.screenshot(shots / "session-keep-interpreter.png")
    finally:
        server.shutdown()
        server.server_close()
        store.close()
