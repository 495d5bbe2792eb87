"""Python frames unwound in the BPF program, interleaved with .eh_frame-unwound native frames.

The fixture's call tree is known: <module> -> main -> sort_with_c -> ctypes -> libffi ->
libc qsort -> libffi closure -> compare (Python) -> work. Every sample taken while it
sorts must show exactly that chain (cut at whatever was running), with the C frames
between sort_with_c and compare in their order, on each local CPython build (Debian's
has _ctypes built in and stripped, so libffi's and libc's exported names are checked).
"""

import ctypes
import glob
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kubeprof.agent.cpu.collector import CpuCollector
from kubeprof.model import FrameKind

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cpu"
pytestmark = [pytest.mark.bpf, pytest.mark.usefixtures("bpf_ready")]

PYENV = sorted(glob.glob("/root/.pyenv/versions/3.1[0-3].*/bin/python3.1[0-3]"))
PYTHONS = ["/usr/bin/python3.11", *PYENV]


def _ldd(python: str) -> list[str]:
    return subprocess.run(["ldd", python], capture_output=True, text=True).stdout.splitlines()


CHAIN = ["<module>", "main", "sort_with_c", "compare", "work"]


def _add(c, proc):
    c.add_target(proc.pid)


def _record(python, seconds, out, add=_add, preexec_fn=None):
    """Run the fixture under a collector: (pid, samples, collector). `add(c, proc)` makes
    the started process a target."""
    c = CpuCollector(hz=99)
    proc = subprocess.Popen(
        [python, str(FIXTURES / "callback_tree.py"), str(seconds), out], preexec_fn=preexec_fn
    )
    samples = []
    try:
        add(c, proc)
        while proc.poll() is None:
            time.sleep(0.3)
            samples += c.poll().samples
    finally:
        samples += c.stop().samples
        proc.kill()  # a failed `add` leaves it running
        proc.wait()
    return proc.pid, samples, c


def _verdict(sample):
    """None if the stack is a correct state of the known tree, else what is wrong."""
    py = [f for f in sample.stack if f.kind is FrameKind.PYTHON]
    names = [f.name for f in py]
    # 3.10 has no co_qualname: the same names, unqualified
    if names not in (CHAIN[:3], CHAIN[:4], CHAIN):
        return f"python frames {names}"
    if len(names) > 3:
        i, j = sample.stack.index(py[2]), sample.stack.index(py[3])
        between = sample.stack[i + 1 : j]
        names_between = [f.name for f in between]
        ffi = [k for k, f in enumerate(between) if "libffi" in f.file]
        # ctypes calls ffi_call -> qsort_r (libc) -> libffi's closure trampoline -> Python
        if "ffi_call" not in names_between or "qsort_r" not in names_between or not ffi:
            return f"native frames between sort_with_c and compare: {names_between}"
        if not names_between.index("ffi_call") < names_between.index("qsort_r") < ffi[-1]:
            return f"native frames out of order: {names_between}"
        if any(f.kind is FrameKind.PYTHON for f in between):
            return "python frame among the C frames"
    leaf_py = sample.stack.index(py[-1])
    if any(f.kind is FrameKind.PYTHON for f in sample.stack[leaf_py + 1 :]):
        return "python frame below the leaf"
    return None


@pytest.mark.parametrize("python", PYTHONS, ids=lambda p: p.split("/")[-1] + ":" + p)
def test_every_sample_has_the_exact_python_stack_between_native_frames(python, tmp_path):
    if not Path(python).exists():
        pytest.skip(f"{python} not installed")
    window = tmp_path / "window.json"
    pid, samples, c = _record(python, 2.5, str(window))
    start, end = json.loads(window.read_text())
    judged = [s for s in samples if s.tid == pid and start <= s.ts_ns <= end]
    wrong = [(v, s) for s in judged if (v := _verdict(s))]
    print({"python": python, "judged": len(judged), "wrong": len(wrong), **c._counters})
    for v, _s in wrong[:5]:
        print(v)
    assert len(judged) >= 150, len(judged)
    # 3.11 (both builds) must be exact on 99 % of samples; 3.10/3.12/3.13 lose up to ~2 %
    # of samples to walks that come back empty (UNWINDER.md, known limits)
    allowed = 0.01 if "3.11" in python else 0.03
    assert len(wrong) <= allowed * len(judged), wrong[:3]
    # the callback is where the time goes: most samples reach it
    deep = sum("compare" in [f.name for f in s.stack] for s in judged)
    assert deep >= 0.8 * len(judged)
    # root side: the process starts in native code, above the first Python frame
    sample = next(s for s in judged if not _verdict(s))
    first_py = next(i for i, f in enumerate(sample.stack) if f.kind is FrameKind.PYTHON)
    assert any(f.name.startswith("Py") for f in sample.stack[:first_py])


_PTRACE_TRACEME, _PTRACE_DETACH = 0, 17


def _stop_at_exec() -> None:
    """preexec_fn: be traced, so the kernel stops the child right after exec(), before
    ld.so maps a single library."""
    ctypes.CDLL(None, use_errno=True).ptrace(_PTRACE_TRACEME, 0, 0, 0)


SHARED = [p for p in PYENV if any("libpython" in line for line in _ldd(p))]


@pytest.mark.skipif(not SHARED, reason="no CPython linked against libpython here")
def test_a_target_added_before_its_libpython_is_mapped_has_python_frames(tmp_path):
    """`Popen` returns right after exec(); a collector that looks then sees the python
    binary without its libpython (and so no `_PyRuntime`) for a few ms. Once, on an idle
    machine, every one of 247 samples of a run came without Python frames."""
    window = tmp_path / "window.json"

    def add_while_held(c, proc):
        _, status = os.waitpid(proc.pid, os.WUNTRACED)  # held at exec: only ld.so mapped
        assert os.WIFSTOPPED(status)
        assert "libpython" not in Path(f"/proc/{proc.pid}/maps").read_text()
        # ptrace requests come from the tracer thread: add the target beside, release here
        adding = threading.Thread(target=c.add_target, args=(proc.pid,))
        adding.start()
        time.sleep(0.2)
        assert adding.is_alive(), "add_target returned before the loader mapped libpython"
        ctypes.CDLL(None, use_errno=True).ptrace(_PTRACE_DETACH, proc.pid, 0, 0)
        adding.join(5)

    pid, samples, _c = _record(SHARED[0], 1.5, str(window), add_while_held, _stop_at_exec)
    start, end = json.loads(window.read_text())
    judged = [s for s in samples if s.tid == pid and start <= s.ts_ns <= end]
    wrong = [v for s in judged if (v := _verdict(s))]
    assert len(judged) >= 80, len(judged)
    assert len(wrong) <= 0.03 * len(judged), wrong[:3]


# A target that forks a child held right after its exec(): the child is the tracee of this
# parent, so only the parent can release it (on "go").
HOLDING_PARENT = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
sys.stdin.readline()
pid = os.fork()
if pid == 0:
    libc.ptrace(0, 0, 0, 0)  # PTRACE_TRACEME: the kernel stops us right after exec()
    os.execv(sys.argv[1], sys.argv[1:])
os.waitpid(pid, os.WUNTRACED)
print(pid, flush=True)
sys.stdin.readline()
libc.ptrace(17, pid, 0, 0)  # PTRACE_DETACH
os.waitpid(pid, 0)
"""


@pytest.mark.skipif(not SHARED, reason="no CPython linked against libpython here")
def test_a_child_first_seen_by_a_poll_before_its_libpython_is_mapped_gets_python_frames(
    tmp_path,
):
    """A target's child that a poll first sees between its exec() and ld.so mapping
    libpython has no `_PyRuntime` yet. The exe does not change afterwards, so only the
    poll-side second look (`CpuCollector._look_again`) can give its samples their Python
    frames: without it, every one comes without them. The look comes at the first poll
    with the child's samples, so those taken before it (up to one poll interval) have
    none: only the samples after it are judged."""
    window = tmp_path / "window.json"
    c = CpuCollector(hz=99)
    fixture = [SHARED[0], str(FIXTURES / "callback_tree.py"), "1.5", str(window)]
    parent = subprocess.Popen(
        [sys.executable, "-c", HOLDING_PARENT, *fixture],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    samples, seen_held, looked_at = [], False, None
    try:
        c.add_target(parent.pid)
        parent.stdin.write("fork\n")
        parent.stdin.flush()
        child = int(parent.stdout.readline())  # held at exec: only ld.so mapped
        assert "libpython" not in Path(f"/proc/{child}/maps").read_text()
        deadline = time.monotonic() + 10  # the polls' scan of the kernel's set: every 2 s
        while not seen_held and time.monotonic() < deadline:
            time.sleep(0.3)
            batch = c.poll()
            samples += batch.samples
            seen_held = any(p.pid == child for p in batch.processes)
        assert seen_held, "no poll found the held child"
        parent.stdin.write("go\n")
        parent.stdin.flush()
        while parent.poll() is None:
            time.sleep(0.3)
            got = c.poll().samples
            samples += got
            if looked_at is None and any(s.pid == child for s in got):
                looked_at = time.monotonic_ns()  # the clock of the samples' ts_ns
    finally:
        samples += c.stop().samples
        parent.kill()
        parent.wait()
        parent.stdin.close()
        parent.stdout.close()
    start, end = json.loads(window.read_text())
    assert looked_at is not None, "no poll got a sample of the child"
    before = [s for s in samples if s.tid == child and s.ts_ns <= looked_at]
    judged = [s for s in samples if s.tid == child and max(start, looked_at) < s.ts_ns <= end]
    wrong = [v for s in judged if (v := _verdict(s))]
    print({"before the look": len(before), "judged": len(judged), "wrong": len(wrong)})
    assert len(judged) >= 80, len(judged)
    assert len(wrong) <= 0.03 * len(judged), wrong[:3]
