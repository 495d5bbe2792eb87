"""The CPU collector against real eBPF: Python shares, native symbols, children, faults."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from kubeprof.agent.cpu.collector import CollectorError, CpuCollector
from kubeprof.model import FrameKind

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cpu"

pytestmark = [pytest.mark.bpf, pytest.mark.usefixtures("bpf_ready")]


def record(cmd, *, poll_every=0.5, **kwargs):
    """Drive the collector as `kubeprof record -- CMD` does; return (samples, procs, c)."""
    c = CpuCollector(hz=99, **kwargs)
    t0 = time.monotonic_ns()
    proc = subprocess.Popen(cmd)
    samples, procs = [], []
    try:
        c.add_target(proc.pid)
        while proc.poll() is None:
            time.sleep(poll_every)
            b = c.poll()
            samples += b.samples
            procs += b.processes
    finally:
        b = c.stop()
        samples += b.samples
        procs += b.processes
        proc.wait()
    t1 = time.monotonic_ns()
    for s in samples:
        assert t0 <= s.ts_ns <= t1
    return samples, procs, c


def in_program(frame):
    return frame.kind is FrameKind.PYTHON and frame.file.endswith("hotcold.py")


def names(sample):
    return [f.name for f in sample.stack]


def test_python_hot_cold_shares(python_exe):
    samples, procs, c = record([python_exe, str(FIXTURES / "hotcold.py"), "8"])
    assert c.lost == 0
    # by the program's own main(): not the interpreter's C main(), under every sample,
    # nor site.py's main(), which runs the venv's .pth files at start-up
    in_main = [s for s in samples if any(in_program(f) and f.name == "main" for f in s.stack)]
    assert len(in_main) > 0.8 * len(samples) and len(in_main) >= 200
    hot = sum("hot" in names(s) for s in in_main)
    cold = sum("cold" in names(s) for s in in_main)
    assert hot + cold >= 0.95 * len(in_main)
    share = hot / (hot + cold)
    assert abs(share - 0.80) < 0.06, f"hot share {share:.3f} from {hot}/{hot + cold}"
    frame = next(f for s in in_main for f in s.stack if f.name == "hot")
    assert frame.kind is FrameKind.PYTHON and frame.file.endswith("hotcold.py") and frame.line > 0
    # Python frames in call order where the interpreter ran them, kernel frames at the leaf.
    for s in in_main:
        kinds = [f.kind for f in s.stack]
        py = [f.name for f in s.stack if f.kind is FrameKind.PYTHON]
        assert py[:2] == ["<module>", "main"]
        if FrameKind.KERNEL in kinds:
            assert all(k is FrameKind.KERNEL for k in kinds[kinds.index(FrameKind.KERNEL) :])
    assert any(f.kind is FrameKind.NATIVE for s in in_main for f in s.stack)
    assert [p.pid for p in procs] == [in_main[0].pid]


def test_native_program_frames_are_symbolized(hotloop):
    samples, procs, _ = record([str(hotloop), "4"])
    assert len(samples) >= 100
    pid = procs[0].pid
    assert all(s.pid == pid and s.tid == pid and s.thread == "hotloop" for s in samples)
    assert all(0 <= s.cpu < os.cpu_count() for s in samples)
    assert [s.ts_ns for s in samples] == sorted(s.ts_ns for s in samples)
    hot = sum("hot_loop" in names(s) for s in samples)
    cold = sum("cold_loop" in names(s) for s in samples)
    assert hot + cold >= 0.9 * len(samples)
    assert abs(hot / (hot + cold) - 0.80) < 0.07
    s = next(s for s in samples if "hot_loop" in names(s))
    main_i, hot_i = names(s).index("main"), names(s).index("hot_loop")
    assert main_i < hot_i  # root first
    assert s.stack[hot_i].kind is FrameKind.NATIVE and s.stack[hot_i].file == str(hotloop)


def test_children_are_included(python_exe, hotloop):
    script = f"import subprocess; subprocess.run([{str(hotloop)!r}, '2'])"
    samples, procs, _ = record([python_exe, "-c", script])
    parent = procs[0].pid
    child_pids = {p.pid for p in procs if p.ppid == parent}
    assert child_pids, procs
    child_samples = [s for s in samples if s.pid in child_pids]
    assert len(child_samples) >= 50
    assert any("hot_loop" in names(s) for s in child_samples)


def test_stop_without_poll_keeps_everything_and_is_idempotent(hotloop):
    c = CpuCollector(hz=99)
    proc = subprocess.Popen([str(hotloop), "1.5"])
    c.add_target(proc.pid)
    proc.wait()
    batch = c.stop()  # e.g. Ctrl-C before the first poll
    assert len(batch.samples) >= 50
    assert batch.processes and batch.processes[0].pid == proc.pid
    assert any("hot_loop" in names(s) for s in batch.samples)  # symbolized after exit
    assert c.stop().samples == ()
    assert c.poll().samples == ()


def test_target_that_exits_at_once_gives_a_clear_note():
    c = CpuCollector(hz=99)
    # `true`, not a short sleep: a sleep's wait is an off-CPU sample now, and a process that
    # waited is reported with its wait, not with this note
    proc = subprocess.Popen(["true"])
    try:
        c.add_target(proc.pid)
    except CollectorError as e:  # already gone: the refusal is the clear note
        proc.wait()  # reaped either way (an unreaped Popen warns, and warnings are errors)
        assert "exited" in str(e) or "no process" in str(e)
        c.stop()
        return
    proc.wait()
    time.sleep(0.2)
    batch = c.stop()
    assert batch.samples == ()
    # the note; or, where even `true` waited (a page read, on a busy machine), its wait
    # stands for it: a process that only waited is reported with its wait
    waited = any(w.pid == proc.pid for w in batch.offcpu_samples)
    noted = any("no CPU samples" in w and str(proc.pid) in w for w in c.warnings)
    assert noted or waited, c.warnings


def test_unknown_pid_is_a_clear_error():
    c = CpuCollector(hz=99)
    try:
        with pytest.raises(CollectorError, match="no process with PID"):
            c.add_target(2**22 + 4321)
        proc = subprocess.Popen(["true"])
        proc_pid = proc.pid
        time.sleep(0.3)  # a zombie: exited, not yet reaped
        with pytest.raises(CollectorError, match="already exited"):
            c.add_target(proc_pid)
        proc.wait()
    finally:
        c.stop()


def test_process_that_execs_python_later_gets_python_frames(python_exe):
    # Like a pyenv shim: the target pid starts as a shell and exec()s the interpreter.
    script = f"sleep 0.3; exec {python_exe} {FIXTURES / 'hotcold.py'} 4"
    samples, procs, _ = record(["sh", "-c", script])
    sh_pid = next(p.pid for p in procs if p.name == "sh")
    assert any(p.pid == sh_pid and p.cmdline.startswith(python_exe) for p in procs)
    hot = sum("hot" in names(s) for s in samples)
    cold = sum("cold" in names(s) for s in samples)
    assert hot + cold >= 0.8 * len(samples) and hot + cold >= 100
    assert abs(hot / (hot + cold) - 0.80) < 0.08


SPIN = """
def spin():
    print("spinning", flush=True)
    while True:
        pass
spin()
"""


def test_a_running_python_program_has_its_python_frames_from_its_first_sample(python_exe):
    # Attached while it already runs its Python code (kubeprof record -- python ..., or
    # --pid): no sample may come before the BPF program knows where its frames are.
    c = CpuCollector(hz=499)
    proc = subprocess.Popen([python_exe, "-c", SPIN], stdout=subprocess.PIPE)
    samples = []
    try:
        assert proc.stdout.readline() == b"spinning\n"
        c.add_target(proc.pid)
        time.sleep(1.0)
        samples += c.poll().samples
    finally:
        samples += c.stop().samples  # stopped first: no sample of it being killed
        proc.kill()
        proc.wait()
        proc.stdout.close()
    ours = [s for s in samples if s.tid == proc.pid]
    assert len(ours) >= 100, len(ours)
    without = [names(s)[-6:] for s in ours if "spin" not in names(s)]
    assert not without, f"{len(without)} of {len(ours)} samples without their Python frames"


def _phase_at(phases, ts_ns, margin_ns=25_000_000):
    """The logged phase running at ts_ns, clear of its boundaries by 2.5 sampling periods."""
    for name, t0, t1 in phases:
        if t0 + margin_ns <= ts_ns < t1 - margin_ns:
            return name
    return None


def _judge(samples, pid, phases, *, native_leaf):
    """(judged, python right, native leaf right) over main-thread samples inside a phase."""
    judged = py_right = leaf_right = 0
    for s in samples:
        want = _phase_at(phases, s.ts_ns) if s.tid == pid else None
        if want is None:
            continue
        judged += 1
        py = [f.name for f in s.stack if f.kind is FrameKind.PYTHON]
        py_right += want in py and not ({"python_phase", "native_phase"} - {want}) & set(py)
        if native_leaf:
            in_crypto = any("libcrypto" in f.file for f in s.stack if f.kind is FrameKind.NATIVE)
            leaf_right += in_crypto == (want == "native_phase")
    return judged, py_right, leaf_right


def test_each_sample_has_its_phase_python_stack_and_native_leaf(python_exe, tmp_path):
    """Per sample: the Python phase (py-spy's stacks, joined by time) and the native leaf
    (the kernel's) agree with the phase the program logged for that instant."""
    log = tmp_path / "phases.json"
    samples, procs, _ = record([python_exe, str(FIXTURES / "phase_log.py"), "5", str(log)])
    phases = json.loads(log.read_text())
    pid = procs[0].pid
    judged, py_right, leaf_right = _judge(samples, pid, phases, native_leaf=True)
    print({"judged": judged, "python": py_right, "leaf": leaf_right, "samples": len(samples)})
    assert judged >= 80, (judged, len(samples))  # on-CPU time is short on a loaded machine
    assert leaf_right >= 0.9 * judged, (leaf_right, judged)  # the kernel's own stacks
    assert py_right >= 0.9 * judged, (py_right, judged)  # py-spy's, placed by timestamp


def test_pyspy_fallback_gives_each_sample_its_phase(python_exe, tmp_path):
    """The same program through the BPF-free collector (Python frames only)."""
    from kubeprof.agent.cpu.pyspy_collector import PyspyCollector

    log = tmp_path / "phases.json"
    proc = subprocess.Popen([python_exe, str(FIXTURES / "phase_log.py"), "5", str(log)])
    col = PyspyCollector(99, segment_s=1.0)
    samples = []
    try:
        col.add_target(proc.pid)
        while proc.poll() is None:
            time.sleep(0.3)
            samples += col.poll().samples
    finally:
        samples += col.stop().samples
        proc.wait()
    phases = json.loads(log.read_text())
    judged, py_right, _ = _judge(samples, proc.pid, phases, native_leaf=False)
    print({"judged": judged, "python": py_right, "samples": len(samples)})
    assert judged >= 80, (judged, len(samples))
    assert py_right >= 0.9 * judged, (py_right, judged)


def test_cached_unwind_and_names_agree_with_an_uncached_walk(python_exe):
    """The unwind memo (callers' walks reused while the words they read are unchanged)
    and the per-range rule and name caches change no frame: every live sample of a
    Python -> C -> Python program walks and names the same as with no cache at all."""
    from kubeprof.agent.cpu.native_unwind import unwind

    pyenv = Path("/root/.pyenv/versions/3.11.7/bin/python3.11")  # no frame pointers
    exe = str(pyenv) if pyenv.exists() else python_exe
    c = CpuCollector(hz=99)
    proc = subprocess.Popen([exe, str(FIXTURES / "callback_tree.py"), "2", os.devnull])
    recs = []
    try:
        c.add_target(proc.pid)
        while proc.poll() is None:
            time.sleep(0.3)
            recs += c._sampler.drain()  # stacks copied out of the ring
    finally:
        recs += c._sampler.drain()
        c.stop()
        proc.wait()
    sym = c._symbolizer
    recs = [r for r in recs if r.pid == proc.pid and r.stack]
    assert len(recs) >= 100
    memo: dict = {}
    deep = 0
    for r in recs:
        cached = unwind(r.regs, r.stack, sym.rules_of(r.pid), memo)
        fresh = unwind(r.regs, r.stack, lambda a, pid=r.pid: sym._unwind_rule(pid, a))
        assert cached == fresh
        deep += len(fresh) >= 4  # from the leaf up to libffi's callback trampoline or _start
        for i, pc in enumerate(fresh):
            addr = pc if i == 0 else pc - 1
            assert sym.user_frame(r.pid, addr) == sym._user_frame(r.pid, addr)
    assert deep >= 0.8 * len(recs)
    assert len(memo) < len(recs) / 2  # the memo was used, not just filled
