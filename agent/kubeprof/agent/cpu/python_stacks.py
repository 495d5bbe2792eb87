"""py-spy as the Python unwinder: Python stacks of a process as timelines per thread.

CPython 3.11 without frame pointers defeats the kernel's user-stack walk, so the Python
part of a stack comes from py-spy, which reads the interpreter's memory. py-spy's
chrometrace output is the only one with per-sample times (microseconds since py-spy
started, on CLOCK_MONOTONIC) and, with --threads, OS thread ids (a "thread (TID)" root
frame). It is written only when py-spy stops, so py-spy runs in overlapping segments:
a new py-spy starts, then the previous one gets SIGINT and its file is parsed.

py-spy's clock origin is unknown to us; it is recovered from the file's closing events,
which carry the time of the write, and the moment we saw the process end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kubeprof.agent.cpu.merge import python_stack_at
from kubeprof.model import Frame, FrameKind, Stack

_THREAD_ROOT = re.compile(r"^thread \((0x[0-9a-fA-F]+|\d+)\)(?:: .*)?$")
_PROCESS_ROOT = re.compile(r"^process \d+")
_MAX_FAILURES = 5


@dataclass(slots=True)
class Timeline:
    """The Python stack of one thread over time: change points, root-first stacks."""

    times_ns: list[int] = field(default_factory=list)  # CLOCK_MONOTONIC, ascending
    stacks: list[Stack] = field(default_factory=list)


@dataclass(slots=True)
class Segment:
    """What one py-spy run saw: timelines by tid, and the span it covered."""

    pid: int
    start_ns: int
    end_ns: int
    timelines: dict[int, Timeline]


def _frame(event: dict[str, Any]) -> Frame:
    """A chrometrace B event as a frame: Python code, or native code (py-spy --native)."""
    filename = event["args"].get("filename") or ""
    line = int(event["args"].get("line") or 0)
    if filename.endswith(".py") or line > 0:
        return Frame(event["name"], FrameKind.PYTHON, filename, line)
    return Frame(event["name"], FrameKind.NATIVE, filename)


def parse_chrometrace(
    events: list[dict[str, Any]], pid: int, origin_ns: int
) -> dict[int, Timeline]:
    """py-spy chrometrace events -> per-OS-thread timelines of root-first Python stacks.

    Events are B/E pairs emitted only when a thread's stack changes; replaying them gives
    the stack after each sample that changed it. Frames that are not Python code (the
    "thread (TID)" and "process ..." roots py-spy adds) are dropped; the thread root
    gives the OS tid.
    """
    open_frames: dict[int, list[dict[str, Any]]] = {}  # chrometrace tid -> open B events
    os_tid: dict[int, int] = {}
    timelines: dict[int, Timeline] = {}
    last_ts: dict[int, int] = {}

    def snapshot(ct_tid: int, ts_us: int) -> None:
        frames = open_frames.get(ct_tid, [])
        tid = os_tid.get(ct_tid)
        if tid is None:
            return
        stack = tuple(
            _frame(e)
            for e in frames
            if not _THREAD_ROOT.match(e["name"]) and not _PROCESS_ROOT.match(e["name"])
        )
        tl = timelines.setdefault(tid, Timeline())
        t = origin_ns + ts_us * 1000
        if tl.times_ns and tl.times_ns[-1] == t:
            tl.stacks[-1] = stack
        else:
            tl.times_ns.append(t)
            tl.stacks.append(stack)

    for e in events:
        if e.get("ph") not in ("B", "E") or int(e.get("pid", pid)) != pid:
            continue
        ct_tid, ts = int(e["tid"]), int(e["ts"])
        if ct_tid in last_ts and last_ts[ct_tid] != ts:
            snapshot(ct_tid, last_ts[ct_tid])
        last_ts[ct_tid] = ts
        stack = open_frames.setdefault(ct_tid, [])
        if e["ph"] == "B":
            m = _THREAD_ROOT.match(e["name"])
            if m:
                os_tid[ct_tid] = int(m.group(1), 0)
            stack.append(e)
        elif stack:
            stack.pop()
    for ct_tid, ts in last_ts.items():
        snapshot(ct_tid, ts)
    return timelines


def pyspy_path() -> str | None:
    """py-spy next to this interpreter (the venv), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.access(here, os.X_OK) else shutil.which("py-spy")


class _Run:
    """One py-spy process writing one chrometrace file."""

    def __init__(
        self, exe: str, pid: int, hz: int, path: str, native: bool, idle: bool = False
    ) -> None:
        cmd = [
            exe,
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(hz),
            "--format",
            "chrometrace",
            "--threads",
            "--full-filenames",
            "-o",
            path,
        ]
        cmd += ["--native"] if native else ["--nonblocking"]
        cmd += ["--idle"] if idle else []  # waiting threads' stacks too (off-CPU view)
        self.path = path
        self.start_ns = time.monotonic_ns()
        self.exit_ns = 0
        self.sigint_ns = 0
        self.period_ns = 1_000_000_000 // hz
        # Own session: a terminal's Ctrl-C must not stop py-spy before stop() reads it.
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        self._waiter = threading.Thread(target=self._wait, daemon=True)
        self._waiter.start()

    def _wait(self) -> None:
        self.proc.wait()
        self.exit_ns = time.monotonic_ns()  # close to py-spy's final write

    def origin_ns(self, write_clock_ns: int) -> int:
        """py-spy's clock origin on CLOCK_MONOTONIC, from the time of its final write.

        The closing E events carry py-spy's clock at write time W. W comes before exit
        (which we see late when this process is busy); after SIGINT, py-spy writes at
        its next sampling tick, so W lies in [sigint, sigint + period].
        """
        write = self.exit_ns
        if self.sigint_ns:
            write = max(self.sigint_ns, min(self.exit_ns, self.sigint_ns + self.period_ns))
        return max(write - write_clock_ns, self.start_ns)

    def finish(self, pid: int, timeout: float = 10.0) -> Segment | None:
        """Stop py-spy (SIGINT makes it write its file) and parse what it saw."""
        if self.proc.poll() is None:
            self.sigint_ns = time.monotonic_ns()
            self.proc.send_signal(signal.SIGINT)
        self._waiter.join(timeout)
        if self._waiter.is_alive():
            self.proc.kill()
            self._waiter.join()
        try:
            with open(self.path) as f:
                events = json.load(f)
        except (OSError, ValueError):
            return None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        times = [int(e["ts"]) for e in events if "ts" in e]
        if not times:
            return None
        origin = self.origin_ns(max(times) * 1000)
        timelines = parse_chrometrace(events, pid, origin)
        first = min((tl.times_ns[0] for tl in timelines.values() if tl.times_ns), default=0)
        return Segment(pid, first, origin + max(times) * 1000, timelines)


class PythonUnwinder:
    """Keeps overlapping py-spy runs on one Python process and collects their segments."""

    def __init__(
        self, pid: int, hz: int, segment_s: float = 4.0, native: bool = False, idle: bool = False
    ) -> None:
        exe = pyspy_path()
        if exe is None:
            raise FileNotFoundError("py-spy not found: pip install py-spy")
        self.pid, self._exe, self._hz, self._native = pid, exe, hz, native
        self._idle = idle
        self._segment_ns = int(segment_s * 1e9)
        self.period_ns = 1_000_000_000 // hz  # py-spy's sampling period
        self._dir = tempfile.mkdtemp(prefix=f"kubeprof-pyspy-{pid}-")
        self._n = 0
        self._run: _Run | None = self._start()
        self.segments: list[Segment] = []
        self._failures = 0

    def _start(self) -> _Run:
        self._n += 1
        path = os.path.join(self._dir, f"{self._n}.json")
        return _Run(self._exe, self.pid, self._hz, path, self._native, self._idle)

    @property
    def done(self) -> bool:
        """No py-spy runs any more (target gone, or it never turned out to be Python)."""
        return self._run is None

    @property
    def covered_until_ns(self) -> int:
        """Samples up to here can be joined now; later ones wait for the next segment."""
        return max((s.end_ns for s in self.segments), default=0)

    def tick(self, process_alive: bool) -> None:
        """Rotate to a new segment when the current one is old enough or py-spy ended."""
        run = self._run
        if run is None:
            return
        ended = run.proc.poll() is not None
        if not ended and time.monotonic_ns() - run.start_ns < self._segment_ns:
            return
        # py-spy ends early when the interpreter is not initialised yet: try again a few
        # times; a process that never turns out to be Python just gets native stacks.
        again = process_alive and (not ended or self._failures < _MAX_FAILURES)
        self._run = self._start() if again else None
        if not self._collect(run) and ended:
            self._failures += 1

    def stop(self) -> None:
        """Finish the current run; no further segments."""
        run, self._run = self._run, None
        if run is not None:
            self._collect(run)
        shutil.rmtree(self._dir, ignore_errors=True)

    def _collect(self, run: _Run) -> bool:
        seg = run.finish(self.pid)
        if seg is not None:
            self.segments.append(seg)
        return seg is not None

    def stack_at(self, tid: int, ts_ns: int, period_ns: int) -> Stack | None:
        """The Python stack of a thread at a time, from the newest segment that has it."""
        for seg in reversed(self.segments):
            tl = seg.timelines.get(tid)
            if tl is not None and seg.start_ns - period_ns <= ts_ns <= seg.end_ns:
                found = python_stack_at(tl.times_ns, tl.stacks, ts_ns, period_ns)
                if found is not None:
                    return found
        return None
