"""What a user reads about attribution: the text and JSON reports of the H200 train_torch
recordings (their raw captures replayed through the receiver, stored, loaded, rendered)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trace_io

from kubeprof import reporting
from kubeprof.agent.gpu.capture import replay
from kubeprof.model import Batch, ProcessInfo
from kubeprof.report.formats import render
from kubeprof.storage import Store

TRUTH = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "truth"


def _report(tmp_path: Path, name: str) -> tuple[str, dict]:
    meta = trace_io.load_trace(TRUTH / f"{name}.jsonl.gz").meta
    batch = replay(TRUTH / f"{name}.kpgcap.gz").batch
    url = f"sqlite:///{tmp_path / 'kp.db'}"
    store = Store.open(url)
    try:
        sid = store.create_session(
            name, command=meta["command"], hz=99, start_ns=meta["session_start_ns"]
        )
        pid = batch.gpu_activities[0].pid
        store.write_batch(
            sid,
            Batch(
                processes=(ProcessInfo(pid, 1, "python3", ""),), gpu_activities=batch.gpu_activities
            ),
        )
        store.finish_session(sid, end_ns=meta["session_end_ns"], meta={"exit_code": "0"})
    finally:
        store.close()
    report = reporting.load(url, name)
    return render(report, "text"), json.loads(render(report, "json"))


@pytest.mark.parametrize(
    ("name", "via_main", "via_backward"),
    [("train_torch", 0.61, 0.0), ("train_torch_autograd", 0.0, 0.60)],
)
def test_reports_say_how_much_is_backward_linked_or_main_thread_fallback(
    tmp_path, name, via_main, via_backward
):
    text, doc = _report(tmp_path, name)
    gpu = doc["gpu"]
    assert gpu["attributed_via_main_share"] == pytest.approx(via_main, abs=0.02)
    assert gpu["attributed_via_backward_share"] == pytest.approx(via_backward, abs=0.02)
    assert ("shown under the main thread's stack" in text) == (via_main > 0)
    assert ("charged to their forward op's line" in text) == (via_backward > 0)
    if via_backward:
        flame = json.dumps(doc["top_stacks"]["gpu"])
        assert "backward of Linear.forward (linear.py:134)" in flame
