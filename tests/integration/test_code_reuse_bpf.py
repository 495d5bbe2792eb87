"""A freed code object's address reused by another, under the real BPF sampler.

The workload defines `alpha`, runs it, frees it, then defines `bravo`, which CPython puts at
the very same address (the workload prints each code object's address and its own
CLOCK_MONOTONIC window), and so on in turn. Code objects are cached by address: before
`CodeReader.recheck`, every `bravo` phase's samples were named `alpha` for the rest of the
run. The collector now rechecks the code objects a poll's samples name before naming them,
so every sample of a phase but those of its last poll must carry that phase's name.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kubeprof.storage import queries
from kubeprof.storage.store import Store

KUBEPROF = str(Path(sys.executable).parent / "kubeprof")
pytestmark = [pytest.mark.bpf, pytest.mark.usefixtures("bpf_ready")]

PHASE_S = 2.5
WORKLOAD = r"""
import gc, time
def make(name):
    ns = {}
    body = "\n    s = 0\n    for i in range(n):\n        s += i * i\n    return s\n"
    exec(f"def {name}(n):" + body, ns)
    return ns[name]
for name in ("alpha", "bravo", "alpha"):
    f = make(name)
    t0 = time.monotonic_ns()
    end = time.monotonic() + %(phase)s
    while time.monotonic() < end:
        f(2000)
    print("PHASE", name, id(f.__code__), t0, time.monotonic_ns(), flush=True)
    del f
    gc.collect()  # the function and its namespace are a cycle: free the code object now
"""


def test_a_reused_code_address_is_named_by_the_object_now_there(tmp_path):
    prog = tmp_path / "reuse.py"
    prog.write_text(WORKLOAD % {"phase": PHASE_S})
    db = f"sqlite:///{tmp_path / 'k.db'}"
    env = {**os.environ, "KUBEPROF_CPU_SOURCE": "bpf"}  # every sample from the BPF walk
    done = subprocess.run(
        [KUBEPROF, "record", "--store", db, "-o", "r", "--", sys.executable, str(prog)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    phases = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("PHASE")]
    assert len(phases) == 3, done.stdout
    if len({addr for _, addr, _, _ in phases}) != 1:
        pytest.skip(f"CPython did not reuse the address this time: {phases}")
    store = Store.open(db)
    with store.engine.connect() as conn:
        cols = queries.sample_columns(conn, queries.find_session(conn, "r"))
    store.close()
    assert cols is not None
    named = {"alpha", "bravo"}
    checked = 0
    for name, _addr, t0, t1 in phases:
        # the phase less its last 0.8 s: samples are named at the next poll (every 0.5 s),
        # and those of an object's last poll can be named after the next one took its place
        settled, last = int(t0) + int(0.2e9), int(t1) - int(0.8e9)
        seen: list[str] = []
        for t in cols.threads:
            for ts, sid in zip(t.ts_ns, t.stack_ids, strict=True):
                if settled <= ts <= last:
                    seen += [f.name for f in cols.stacks[sid] if f.name in named]
        assert seen, f"no sample of {name} in the middle of its phase"
        assert set(seen) == {name}, f"{name}'s phase: {sorted(set(seen))} ({len(seen)} frames)"
        checked += len(seen)
    assert checked >= 30
