"""Export one recorded session (SQLite store) as a trace fixture, with its ground truth.

Used by ``truth_run.sh`` on the GPU machine after ``kubeprof record --gpu``::

    python tests/gpu/truth_export.py --store sqlite:///w/truth.db --session half \\
        --stdout w/half.stdout --command "examples/gpu_truth.py --mode half" --out w/half.jsonl.gz

The fixture (``tests/fixtures/gpu/trace_io.py`` format) holds every GPU activity and metric
and every CPU sample of the session, the session's meta (``cpu_source``...), its counters,
and the workload's own ``KUBEPROF_TRUTH`` line (``meta["truth"]``) when it printed one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "gpu"))

import trace_io  # noqa: E402
from sqlalchemy import select  # noqa: E402

from kubeprof.model import CpuSample  # noqa: E402
from kubeprof.storage import Store, offcpu  # noqa: E402
from kubeprof.storage import queries as q  # noqa: E402
from kubeprof.storage.intern import load_stacks  # noqa: E402
from kubeprof.storage.models import SampleRow  # noqa: E402

TRUTH_PREFIX = "KUBEPROF_TRUTH "


def truth_line(stdout_text: str) -> dict[str, Any] | None:
    """The workload's ``KUBEPROF_TRUTH {json}`` line, parsed (the last one wins)."""
    found = None
    for line in stdout_text.splitlines():
        if line.startswith(TRUTH_PREFIX):
            found = json.loads(line[len(TRUTH_PREFIX) :])
    return found


def cpu_samples(conn: Any, session_id: int) -> list[CpuSample]:
    t = SampleRow.__table__
    rows = conn.execute(
        select(t).where(t.c.session_id == session_id).order_by(t.c.ts_ns, t.c.id)
    ).all()
    stacks = load_stacks(conn, (r.stack_id for r in rows))
    return [CpuSample(r.ts_ns, r.pid, r.tid, r.thread, r.cpu, stacks[r.stack_id]) for r in rows]


def export(
    store_url: str, session: str, out: Path, command: str, stdout_text: str, extra: dict[str, Any]
) -> dict[str, Any]:
    store = Store.open(store_url)
    try:
        with store.engine.connect() as conn:
            info = q.find_session(conn, session)
            acts = q.gpu_activities(conn, info.id)
            metrics = q.gpu_metrics(conn, info.id)
            counters = q.counters(conn, info.id)
            samples = cpu_samples(conn, info.id)
            waits = offcpu.offcpu_samples(conn, info.id)
    finally:
        store.close()
    meta = {
        "name": info.name,
        "command": command,
        "session_start_ns": info.start_ns,
        "session_end_ns": info.end_ns,
        "session_meta": info.meta,
        "counters": counters,
        "truth": truth_line(stdout_text),
        **extra,
    }
    trace_io.dump(out, meta, acts, metrics, samples, waits)
    kinds: dict[str, int] = {}
    for a in acts:
        kinds[a.kind] = kinds.get(a.kind, 0) + 1
    return {
        "file": out.name,
        "bytes": out.stat().st_size,
        "activities": kinds,
        "cpu_samples": len(samples),
        "offcpu_samples": len(waits),
        "metrics": len(metrics),
        "truth": meta["truth"] is not None,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", required=True)
    p.add_argument("--session", required=True)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--command", required=True, help="the command as the fixture names it")
    p.add_argument("--stdout", type=Path, help="the workload's stdout (for KUBEPROF_TRUTH)")
    p.add_argument("--extra", default="{}", help="JSON merged into meta (versions, device)")
    args = p.parse_args()
    text = args.stdout.read_text(errors="replace") if args.stdout else ""
    summary = export(args.store, args.session, args.out, args.command, text, json.loads(args.extra))
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
