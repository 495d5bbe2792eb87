"""The BPF-free CPU collector: /proc thread states + py-spy stacks, and its selection."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from kubeprof.agent.cpu import pyspy_collector as pc
from kubeprof.agent.cpu.collector import CollectorError
from kubeprof.agent.cpu.python_stacks import pyspy_path
from kubeprof.model import FrameKind

needs_pyspy = pytest.mark.skipif(
    pyspy_path() is None or os.geteuid() != 0, reason="needs py-spy and root (ptrace)"
)


def test_parse_task_stat_with_odd_names():
    fields = " ".join(str(n) for n in range(4, 53))  # proc(5) field n holds n
    comm, state, cpu = pc.parse_task_stat(f"123 (a (b) c) R {fields}\n")
    assert (comm, state, cpu) == ("a (b) c", "R", 39)
    assert pc.parse_task_stat("5 (x) S 1 2")[1:] == ("S", -1)  # short line: CPU unknown


def test_source_selection(monkeypatch):
    from kubeprof.agent.cpu import collector

    class NoBpf:
        def __init__(self, hz, **_knobs):
            raise CollectorError("no permission to load BPF programs")

    monkeypatch.setattr(collector, "CpuCollector", NoBpf)
    monkeypatch.setattr(pc, "pyspy_path", lambda: "/bin/true")
    logged: list[str] = []
    got = pc.open_cpu_collector(99, logged.append, "auto")
    assert isinstance(got, pc.PyspyCollector) and got.cpu_source == "py-spy"
    assert "no permission to load BPF programs" in logged[0] and "py-spy" in logged[0]
    with pytest.raises(CollectorError, match="no permission"):
        pc.open_cpu_collector(99, logged.append, "bpf")
    monkeypatch.setenv(pc.ENV_SOURCE, "py-spy")
    assert isinstance(pc.open_cpu_collector(99, logged.append), pc.PyspyCollector)
    assert len(logged) == 1  # forced: nothing to explain
    with pytest.raises(CollectorError, match="unknown KUBEPROF_CPU_SOURCE"):
        pc.open_cpu_collector(99, logged.append, "perf")
    monkeypatch.setattr(pc, "pyspy_path", lambda: None)
    with pytest.raises(CollectorError, match=r"no permission.*py-spy fallback cannot start"):
        pc.open_cpu_collector(99, logged.append, "auto")


# Phases much longer than the 10 ms sampling period, each in its own function; the child
# writes when each began (CLOCK_MONOTONIC, the clock samples carry).
CHILD = textwrap.dedent(
    """
    import json, sys, time
    def crunch_a(until):
        x = 0
        while time.monotonic_ns() < until:
            x += 1
    def crunch_b(until):
        s = 0.0
        while time.monotonic_ns() < until:
            s += 0.5
    def nap(until):
        time.sleep(max(0, until - time.monotonic_ns()) / 1e9)
    time.sleep(0.5)  # let the collector and py-spy attach
    phases = []
    for _ in range(4):
        for f in (crunch_a, crunch_b, nap):
            t = time.monotonic_ns()
            phases.append([f.__name__, t])
            f(t + 250_000_000)
    phases.append(["end", time.monotonic_ns()])
    print(json.dumps(phases), flush=True)
    """
)


@needs_pyspy
def test_each_sample_carries_the_phase_running_at_its_time():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    col = pc.PyspyCollector(99, segment_s=1.0)
    col.add_target(child.pid)
    samples, procs = [], []
    while child.poll() is None:
        time.sleep(0.2)
        batch = col.poll()
        samples += batch.samples
        procs += batch.processes
    samples += col.stop().samples
    with child.stdout:
        phases = json.loads(child.stdout.read())
    main = [s for s in samples if s.tid == child.pid]
    assert main and all(s.pid == child.pid for s in main)
    assert [p.pid for p in procs] == [child.pid]

    def phase_at(ts):
        for (name, t0), (_, t1) in itertools.pairwise(phases):
            if t0 + 20e6 <= ts < t1 - 20e6:  # clear of a boundary by two periods
                return name
        return None

    judged = right = in_nap = 0
    for s in main:
        want = phase_at(s.ts_ns)
        if want is None:
            continue
        if want == "nap":
            in_nap += 1
            continue
        judged += 1
        names = [f.name for f in s.stack if f.kind is FrameKind.PYTHON]
        right += bool(names) and names[-1] == want
    crunch_ms = 8 * 250 - 8 * 40
    assert judged >= 0.6 * crunch_ms / 10.1, (judged, len(main))  # most ticks of the phases
    assert right >= 0.9 * judged, (right, judged)
    assert in_nap <= 0.05 * judged  # a sleeping thread is not on a CPU: no samples
    assert len({s.thread for s in main}) == 1


def test_counters_are_increments(monkeypatch):
    monkeypatch.setattr(pc, "pyspy_path", lambda: "/bin/true")
    col = pc.PyspyCollector(99)
    col._counters["cpu_ticks_late"] = 5
    assert col.poll().counters == {"cpu_ticks_late": 5}
    assert col.poll().counters == {}
    col._counters["cpu_ticks_late"] = 7
    assert col.stop().counters == {"cpu_ticks_late": 2}


@needs_pyspy
def test_record_falls_back_and_says_so_in_the_session_meta(tmp_path, monkeypatch):
    from kubeprof.agent.record import RecordOptions, record
    from kubeprof.storage import Store
    from kubeprof.storage import queries as q

    monkeypatch.setenv(pc.ENV_SOURCE, "py-spy")  # as where BPF cannot load
    url = f"sqlite:///{tmp_path}/r.db"
    busy = "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass"
    res = record(
        RecordOptions(
            command=[sys.executable, "-c", busy],
            store_url=url,
            name="fallback",
            poll_interval_s=0.1,
            log=lambda m: None,
        )
    )
    assert res.exit_code == 0 and res.records > 50
    from kubeprof.storage.offcpu import offcpu_samples

    store = Store.open(url)
    with store.engine.connect() as conn:
        session = q.find_session(conn, "fallback")
        waits = len(offcpu_samples(conn, session.id))  # a tick that found the thread waiting
    store.close()
    assert session.meta["cpu_source"] == "py-spy" and session.samples + waits == res.records
