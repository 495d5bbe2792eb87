"""Every GPU fixture's report, rendered through a store, to compare two versions of kubeprof.

Usage: .venv/bin/python bench/fixture_reports.py --store URL --out DIR
       (then the same with the other tree first on PYTHONPATH, and `diff -r DIR1 DIR2`)

Each trace under tests/fixtures/gpu (``trace_io`` files: kernels, metrics, CPU samples and
off-CPU waits) is written as one session into the store at URL (a fresh database: session
names are the fixtures' paths) through `Store.write_batch`, then `kubeprof report` renders
it as text, json, html, collapsed (cpu and gpu views) and perfetto, each to DIR/<fixture>.<format>.
A speed change must leave every file byte-identical.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "gpu"
sys.path.insert(0, str(FIXTURES))

import trace_io  # noqa: E402

from kubeprof.model import Batch, ProcessInfo  # noqa: E402
from kubeprof.storage import Store  # noqa: E402

# (format, view): "" is the format's default (text and html show every view)
FORMATS = (
    ("text", ""),
    ("json", ""),
    ("html", ""),
    ("collapsed", "cpu"),
    ("collapsed", "gpu"),
    ("perfetto", ""),
)


def store_trace(store: Store, name: str, path: Path) -> None:
    """One fixture as session ``name``, in one batch."""
    tr = trace_io.load_trace(path)
    m = tr.meta
    start = int(m.get("session_start_ns") or 0)
    end = int(m.get("session_end_ns") or 0)
    sid = store.create_session(
        name,
        command=m.get("command", ""),
        hz=99,
        start_ns=start,
        meta=dict(m.get("session_meta") or {}),
    )
    pids = sorted({a.pid for a in tr.activities} | {s.pid for s in tr.samples})
    procs = tuple(ProcessInfo(pid=p, ppid=1, name="python3", cmdline="") for p in pids)
    batch = Batch(
        samples=tuple(tr.samples),
        processes=procs,
        gpu_activities=tuple(tr.activities),
        gpu_metrics=tuple(tr.metrics),
        counters=dict(m.get("counters") or {}),
        offcpu_samples=tuple(tr.offcpu),
    )
    store.write_batch(sid, batch)
    store.finish_session(sid, end_ns=end)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--store", required=True, help="a fresh database's URL")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    store = Store.open(args.store)
    names = []
    for path in sorted(FIXTURES.rglob("*.jsonl.gz")):
        name = str(path.relative_to(FIXTURES)).removesuffix(".jsonl.gz").replace("/", "_")
        try:
            store_trace(store, name, path)
        except (KeyError, TypeError, ValueError) as exc:  # not a trace_io file
            print(f"skipped {path.relative_to(REPO)}: {type(exc).__name__}: {exc}")
            continue
        names.append(name)
    store.close()
    for name in names:
        for fmt, view in FORMATS:
            out = args.out / f"{name}.{view or 'all'}.{fmt}"
            argv = [sys.executable, "-m", "kubeprof.cli", "report", "--store", args.store, name]
            argv += ["--format", fmt, "--out", str(out), *(["--view", view] if view else [])]
            r = subprocess.run(argv, capture_output=True, text=True, check=False)
            if r.returncode:
                out.write_text(f"exit {r.returncode}\n{r.stderr}")
        print(f"{name}: rendered")


if __name__ == "__main__":
    main()
