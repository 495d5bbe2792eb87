"""Store an H200 ground-truth fixture (tests/fixtures/gpu/truth) the way `kubeprof record`
would have, so report tests go through the real queries and `reporting.load`."""

from __future__ import annotations

import sys
from pathlib import Path

from kubeprof.model import Batch, ProcessInfo
from kubeprof.storage import Store

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gpu"
TRUTH = FIXTURES / "truth"
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))

import trace_io  # noqa: E402 - the fixture reader lives next to the fixtures


def store_fixture(
    url: str, mode: str, *, drop_kernels: bool = False, meta: dict[str, str] | None = None
) -> dict:
    """Write fixture `mode` as session `mode` into the store at `url`; returns its truth.

    ``drop_kernels`` keeps everything but the GPU records (a tracer that did not run);
    ``meta`` entries override the recorded session meta.
    """
    tr = trace_io.load_trace(TRUTH / f"{mode}.jsonl.gz")
    m = tr.meta
    session_meta = {**(m.get("session_meta") or {}), **(meta or {})}
    truth = m.get("truth") or {}
    acts = () if drop_kernels else tuple(tr.activities)
    store = Store.open(url)
    try:
        sid = store.create_session(
            mode,
            command=m.get("command", ""),
            hz=99,
            start_ns=m["session_start_ns"],
            meta=session_meta,
        )
        pid = truth.get("pid") or (tr.samples[0].pid if tr.samples else 0)
        procs = (ProcessInfo(pid=pid, ppid=1, name="python3", cmdline=m.get("command", "")),)
        counters = dict(m.get("counters") or {})
        if drop_kernels:
            counters.pop("gpu_kernels", None)
        for i in range(0, len(tr.samples), 20_000):
            store.write_batch(sid, Batch(samples=tuple(tr.samples[i : i + 20_000])))
        store.write_batch(
            sid,
            Batch(
                processes=procs,
                gpu_activities=acts,
                gpu_metrics=tuple(tr.metrics),
                counters=counters,
            ),
        )
        store.finish_session(sid, end_ns=m["session_end_ns"], meta={"exit_code": "0"})
    finally:
        store.close()
    return truth


__all__ = ["TRUTH", "store_fixture", "trace_io"]
