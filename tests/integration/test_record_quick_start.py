"""`kubeprof record`'s quick start (agent/kubeprof/agent/cpu/handover.py), with real BPF.

A Python command starts at once; py-spy samples it while the BPF sampler compiles, then BPF
takes over. What users rely on: the first sample comes right after the program starts; the
run is covered without a hole or a double at the handover; the BPF part has native frames;
the report says which sampler covered what. A command that is not Python waits for BPF.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kubeprof.agent.cpu.pyspy_collector import NO_PYTHON
from kubeprof.model import FrameKind
from kubeprof.storage import queries
from kubeprof.storage.store import Store

KUBEPROF = str(Path(sys.executable).parent / "kubeprof")
pytestmark = [pytest.mark.bpf, pytest.mark.usefixtures("bpf_ready")]

SPIN = r"""
import sys, time
print("START", time.monotonic_ns(), flush=True)
end = time.perf_counter() + float(sys.argv[1])
while time.perf_counter() < end:
    sum(i * i for i in range(100))
"""


def _record(tmp_path: Path, *command: str) -> tuple[str, subprocess.CompletedProcess]:
    db = f"sqlite:///{tmp_path / 'k.db'}"
    env = {k: v for k, v in os.environ.items() if k != "KUBEPROF_CPU_SOURCE"}
    done = subprocess.run(
        [KUBEPROF, "record", "--store", db, "-o", "s", "--", *command],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return db, done


def test_python_starts_at_once_and_bpf_takes_over_without_a_hole(tmp_path):
    prog = tmp_path / "spin.py"
    prog.write_text(SPIN)
    # long enough for the compile to finish on a loaded 2-core machine
    db, done = _record(tmp_path, sys.executable, str(prog), "14")
    start_ns = int(done.stdout.split()[1])
    store = Store.open(db)
    with store.engine.connect() as conn:
        info = queries.find_session(conn, "s")
        cols = queries.sample_columns(conn, info)
    store.close()
    assert info.meta["cpu_source"] == "bpf", info.meta
    handover_s = float(info.meta["cpu_handover_s"])
    assert 0 < handover_s < 14
    (main,) = [t for t in cols.threads if t.tid == t.pid and len(t.ts_ns) > 100]
    ts = list(main.ts_ns)
    # the first sample within half a second of the program's first line
    assert ts[0] - start_ns < 500_000_000, (ts[0] - start_ns) / 1e9
    # py-spy's samples (Python frames only) before the handover, BPF's (native frames too,
    # where the user stack was copied: not always on a loaded machine) after it
    # (py-spy's "[no Python frames]" marker, for a tick before its first stack, is not BPF's)
    native = [
        any(f.kind is not FrameKind.PYTHON and f != NO_PYTHON for f in cols.stacks[s])
        for s in main.stack_ids
    ]
    handover_ns = info.start_ns + handover_s * 1e9  # the collector started just before
    before = [n for t, n in zip(ts, native, strict=True) if t < handover_ns - 0.5e9]
    after = [n for t, n in zip(ts, native, strict=True) if t > handover_ns + 0.5e9]
    assert before and not any(before), "a BPF sample before the handover"
    assert after and sum(after) >= 0.5 * len(after), f"{sum(after)} of {len(after)} native"
    # no hole: consecutive samples of the spinning thread never a second apart, also at
    # the handover; no double: one sample per tick at most
    gaps = [b - a for a, b in itertools.pairwise(ts)]
    assert max(gaps) < 1_000_000_000, max(gaps) / 1e9
    assert len(ts) <= 1.3 * 99 * 14, len(ts)
    report = subprocess.run(
        [KUBEPROF, "report", "--store", db, "--format", "text"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"py-spy, Python frames only, for the first {info.meta['cpu_handover_s']} s" in report


def test_a_command_that_is_not_python_waits_for_bpf(tmp_path):
    db, _ = _record(tmp_path, "sleep", "1")
    store = Store.open(db)
    with store.engine.connect() as conn:
        info = queries.find_session(conn, "s")
    store.close()
    assert info.meta["cpu_source"] == "bpf" and "cpu_handover_s" not in info.meta
