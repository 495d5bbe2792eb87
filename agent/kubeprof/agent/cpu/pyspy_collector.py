"""CPU samples where BPF is not allowed: on-CPU threads from /proc, Python stacks from py-spy.

Many machines and pods cannot load BPF (no CAP_BPF, no kernel headers, a VM without BPF,
like the H200 machine here). There the BPF ``CpuCollector`` cannot start, and this one is
used instead. It keeps the BPF sampler's meaning of a sample, one on-CPU thread at one
instant, without a kernel program:

- a sampling thread wakes ``hz`` times a second and reads ``/proc/PID/task/TID/stat`` of
  every thread of the targets (kept open and re-read with ``pread``): a thread in state
  ``R`` is on a CPU (or about to be) and becomes a sample, with the CPU it last ran on;
- the Python stack of that thread at that instant comes from py-spy's per-thread
  timelines (``python_stacks.PythonUnwinder``, the same segments the BPF path joins with).

What it cannot give: native and kernel frames (py-spy without ``--native``, which would stop
the target), and stacks of threads with no Python frames (shown as one ``[no Python
frames]`` frame). A thread that wakes into new code shows its previous stack until py-spy's
next sample of it, at most one py-spy period later. The source is recorded in the session's
meta as ``cpu_source`` so a report can say which sampler produced the profile.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kubeprof.agent.cpu import procfs
from kubeprof.agent.cpu.merge import is_interpreter_path
from kubeprof.agent.cpu.python_stacks import PythonUnwinder, pyspy_path
from kubeprof.agent.cpu.records import on_cpu, waiting
from kubeprof.agent.cpu.syscalls import syscall_name
from kubeprof.model import (
    Batch,
    CpuSample,
    Frame,
    FrameKind,
    OffCpuSample,
    OffCpuSource,
    ProcessInfo,
)
from kubeprof.protocol.settings import DEFAULT_CPU_HZ

if TYPE_CHECKING:  # the BPF collector imports bcc: only loaded when tried
    from kubeprof.agent.cpu.collector import CpuCollector
    from kubeprof.agent.cpu.offcpu_probe import OffCpuKnobs

_WAITING = {"S": "sleeping", "D": "disk", "I": "idle", "T": "stopped", "t": "traced"}
ENV_SOURCE = "KUBEPROF_CPU_SOURCE"  # auto (default): BPF, else py-spy; or bpf / py-spy
NO_PYTHON = Frame("[no Python frames]", FrameKind.NATIVE)
_REFRESH_S = 0.5  # how often the thread list of each target is re-read


class PyspyCollectorError(RuntimeError):
    """A one-line message for the user: the cause and the fix."""


@dataclass(frozen=True, slots=True)
class Tick:
    """One thread seen running at one instant (a sample waiting for its Python stack)."""

    ts_ns: int
    pid: int
    tid: int
    comm: str
    cpu: int
    wait: str = ""  # a thread seen not running: why it waits ("read", "sleeping", ...)


def parse_task_stat(text: str) -> tuple[str, str, int]:
    """(comm, state, last CPU) from a /proc/PID/task/TID/stat line.

    The name is in parentheses and may itself hold spaces and parentheses, so fields are
    counted from the last ``)``; the CPU is field 39 of proc(5).
    """
    close = text.rfind(")")
    comm = text[text.find("(") + 1 : close]
    rest = text[close + 2 :].split()
    cpu = int(rest[36]) if len(rest) > 36 else -1
    return comm, rest[0] if rest else "?", cpu


class _ThreadStates:
    """Open stat files of a process's threads, re-read with pread (one syscall each)."""

    def __init__(self, pid: int, proc: str) -> None:
        self.pid, self.proc = pid, proc
        self.fds: dict[int, int] = {}
        self.listed_at = 0.0

    def refresh(self, now: float) -> None:
        if now - self.listed_at < _REFRESH_S:
            return
        self.listed_at = now
        try:
            tids = {int(t) for t in os.listdir(f"{self.proc}/{self.pid}/task")}
        except OSError:
            tids = set()
        for tid in set(self.fds) - tids:
            self._forget(tid)
        for tid in tids - set(self.fds):
            with contextlib.suppress(OSError):
                self.fds[tid] = os.open(f"{self.proc}/{self.pid}/task/{tid}/stat", os.O_RDONLY)

    def running(self, ts_ns: int, idle: bool = False) -> list[Tick]:
        """Threads in state R; with `idle`, the others too, with why they wait."""
        out = []
        for tid, fd in list(self.fds.items()):
            try:
                raw = os.pread(fd, 1024, 0)
            except OSError:  # the thread exited
                self._forget(tid)
                continue
            if not raw:
                self._forget(tid)
                continue
            comm, state, cpu = parse_task_stat(raw.decode(errors="replace"))
            if state == "R":
                out.append(Tick(ts_ns, self.pid, tid, comm, cpu))
            elif idle and state in _WAITING:
                out.append(Tick(ts_ns, self.pid, tid, comm, cpu, self._reason(tid, state)))
        return out

    def _reason(self, tid: int, state: str) -> str:
        """The syscall a waiting thread is in (/proc/.../syscall), else its state."""
        try:
            with open(f"{self.proc}/{self.pid}/task/{tid}/syscall") as f:
                first = f.read().split(" ", 1)[0]
        except OSError:
            first = ""
        if first.isdigit():
            return syscall_name(int(first))
        return _WAITING[state]

    def _forget(self, tid: int) -> None:
        fd = self.fds.pop(tid, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        for tid in list(self.fds):
            self._forget(tid)


class PyspyCollector:
    """Samples on-CPU threads of target processes and their descendants, BPF-free.

    Same interface as ``CpuCollector`` (``add_target``, ``poll``, ``stop``, ``warnings``);
    Python samples are handed out once py-spy's segment covering them is parsed (a
    ``segment_s`` lag), everything at ``stop``.
    """

    cpu_source = "py-spy"

    def __init__(
        self,
        hz: int = DEFAULT_CPU_HZ,
        *,
        segment_s: float = 4.0,
        proc: str = "/proc",
        idle: bool = True,
    ) -> None:
        if not 1 <= hz <= 1000:
            raise PyspyCollectorError(f"sampling rate {hz} Hz is out of range: use 1..1000")
        if pyspy_path() is None:
            raise PyspyCollectorError("py-spy not found: pip install py-spy==0.4.3")
        self.hz, self.segment_s, self.proc = hz, segment_s, proc
        self.idle = idle  # waiting threads sampled too: off-CPU samples (sampled-wall)
        self.period_ns = 1_000_000_000 // hz
        self.warnings: list[str] = []
        self._targets: set[int] = set()
        self._states: dict[int, _ThreadStates] = {}  # pid -> its threads (sampler thread)
        self._pids: frozenset[int] = frozenset()  # what the sampler thread reads
        self._ticks: list[Tick] = []  # appended by the sampler thread, under _lock
        self._lock = threading.Lock()
        self._held: list[Tick] = []
        self._unwinders: dict[int, PythonUnwinder] = {}
        self._known: set[int] = set()
        self._new_procs: list[ProcessInfo] = []
        self._counters = {"cpu_python_unjoined": 0, "cpu_ticks_late": 0}
        self._reported: dict[str, int] = {}
        self._total = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._last_scan = 0.0

    # -- targets -------------------------------------------------------------------------
    def add_target(self, pid: int) -> None:
        """Profile pid and every descendant (existing ones now, later ones at each poll)."""
        if self._stopped:
            raise PyspyCollectorError("the CPU collector is stopped: create a new one")
        problem = _pid_problem(pid, self.proc)
        if problem:
            raise PyspyCollectorError(problem)
        self._targets.add(pid)
        self._scan(force=True)
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._sample_loop, name="kubeprof-cpu-pyspy", daemon=True
            )
            self._thread.start()

    def _scan(self, *, force: bool = False) -> None:
        """Find descendants, start py-spy on new Python processes."""
        now = time.monotonic()
        if not force and now - self._last_scan < _REFRESH_S:
            return
        self._last_scan = now
        pids = set()
        for t in self._targets:
            if procfs.is_alive(t, self.proc):
                pids.add(t)
                pids |= procfs.descendants(t, self.proc)
        for pid in pids - self._known:
            self._see(pid)
        self._pids = frozenset(pids)

    def _see(self, pid: int) -> None:
        self._known.add(pid)
        info = procfs.process_info(pid, self.proc)
        if info is not None:
            self._new_procs.append(info)
        if _is_python(pid, self.proc):
            try:
                self._unwinders[pid] = PythonUnwinder(pid, self.hz, self.segment_s, idle=self.idle)
            except OSError as e:
                self.warnings.append(f"no Python frames for PID {pid}: {e}")

    # -- sampling thread -----------------------------------------------------------------
    def _sample_loop(self) -> None:
        period = self.period_ns
        next_ns = time.monotonic_ns()
        while not self._stop.is_set():
            now = time.monotonic_ns()
            if now < next_ns:
                self._stop.wait((next_ns - now) / 1e9)
                continue
            if now - next_ns > period:  # fell behind (GIL, load): skip, don't burst
                self._counters["cpu_ticks_late"] += (now - next_ns) // period
                next_ns = now
            next_ns += period
            self._tick(now)

    def _tick(self, ts_ns: int) -> None:
        pids = self._pids
        mono = ts_ns / 1e9
        for pid in pids:
            st = self._states.get(pid)
            if st is None:
                st = self._states[pid] = _ThreadStates(pid, self.proc)
            st.refresh(mono)
            running = st.running(ts_ns, self.idle)
            if running:
                with self._lock:
                    self._ticks.extend(running)
        for pid in set(self._states) - pids:
            self._states.pop(pid).close()

    # -- polling -------------------------------------------------------------------------
    def poll(self) -> Batch:
        """Samples whose Python stacks are known now, and new processes."""
        if self._stopped:
            return Batch()
        self._scan()
        for pid, unwinder in self._unwinders.items():
            unwinder.tick(procfs.is_alive(pid, self.proc))
        return self._batch(final=False)

    def stop(self) -> Batch:
        """Stop sampling, finish py-spy, return every sample still held."""
        if self._stopped:
            return Batch(counters=self._increments())
        self._stopped = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        for st in self._states.values():
            st.close()
        for unwinder in self._unwinders.values():
            with contextlib.suppress(Exception):
                unwinder.stop()
        batch = self._batch(final=True)
        if self._targets and not self._total:
            pids = ", ".join(map(str, sorted(self._targets)))
            self.warnings.append(
                f"no CPU samples for PID {pids}: it exited or slept before the first sample "
                f"({1000 // self.hz} ms at {self.hz} Hz)"
            )
        return batch

    def _batch(self, *, final: bool) -> Batch:
        with self._lock:
            ticks, self._ticks = self._ticks, []
        ready: list[CpuSample] = []
        waits: list[OffCpuSample] = []
        keep: list[Tick] = []
        for t in [*self._held, *ticks]:
            unwinder = self._unwinders.get(t.pid)
            py: tuple[Frame, ...] | None = None
            if unwinder is not None:
                if not (final or unwinder.done or t.ts_ns <= unwinder.covered_until_ns):
                    keep.append(t)
                    continue
                py = unwinder.stack_at(t.tid, t.ts_ns, unwinder.period_ns)
                if not py and not t.wait:
                    self._counters["cpu_python_unjoined"] += 1
            if t.wait:
                waits.append(self._wait(t, py))
            else:
                ready.append(self._sample(t, py))
        self._held = keep
        procs, self._new_procs = tuple(self._new_procs), []
        return Batch(
            samples=tuple(ready),
            processes=procs,
            counters=self._increments(),
            offcpu_samples=tuple(waits),
        )

    def _wait(self, t: Tick, python: tuple[Frame, ...] | None) -> OffCpuSample:
        """A thread seen waiting at a tick: it stands for one sampling period of waiting."""
        self._total += 1
        period, stack = self.period_ns, python or (NO_PYTHON,)
        return waiting(t, period, period, t.wait, OffCpuSource.SAMPLED_WALL, stack)

    def _increments(self) -> dict[str, int]:
        """Counters since the last batch (stores and shippers add them up)."""
        now = dict(self._counters)
        out = {k: v - self._reported.get(k, 0) for k, v in now.items()}
        self._reported = now
        return {k: v for k, v in out.items() if v}

    def _sample(self, t: Tick, python: tuple[Frame, ...] | None) -> CpuSample:
        self._total += 1
        return on_cpu(t, t.cpu, python or (NO_PYTHON,))


def _pid_problem(pid: int, proc: str) -> str | None:
    st = procfs.stat_fields(pid, proc)
    if st is None:
        return f"no process with PID {pid}: check the PID (ps -p {pid}) or start the command"
    if st[1] in ("Z", "X"):
        return f"process {pid} has already exited: nothing to profile"
    return None


def _is_python(pid: int, proc: str) -> bool:
    if is_interpreter_path(procfs.exe(pid, proc)):
        return True
    try:
        with open(f"{proc}/{pid}/maps") as f:
            return "libpython" in f.read()
    except OSError:
        return False


def open_cpu_collector(
    hz: int,
    log: Callable[[str], None],
    source: str | None = None,
    *,
    offcpu: OffCpuKnobs | None = None,
) -> CpuCollector | PyspyCollector:
    """The CPU collector for ``kubeprof record``: BPF where it loads, else py-spy.

    ``source`` (default: $KUBEPROF_CPU_SOURCE, else ``auto``) forces one: ``bpf`` fails
    when BPF cannot load, ``py-spy`` skips BPF. Either has ``cpu_source`` ("bpf", "py-spy").
    Raises ``CollectorError`` with both causes when neither can start.
    """
    from kubeprof.agent.cpu.collector import CollectorError, CpuCollector

    source = source or os.environ.get(ENV_SOURCE, "auto")
    if source not in ("auto", "bpf", "py-spy"):
        raise CollectorError(f"unknown {ENV_SOURCE}={source!r}: use auto, bpf or py-spy")
    bpf_problem = f"skipped ({ENV_SOURCE}=py-spy)"
    if source != "py-spy":
        try:
            collector = CpuCollector(hz=hz, offcpu=offcpu)
        except CollectorError as exc:
            if source == "bpf":
                raise
            bpf_problem = str(exc)
        else:
            return collector
    try:
        fallback = PyspyCollector(hz, idle=offcpu is None or offcpu.enabled)
    except PyspyCollectorError as exc:
        raise CollectorError(f"{bpf_problem}; and the py-spy fallback cannot start: {exc}") from exc
    if source == "auto":
        log(
            f"kubeprof: BPF CPU sampler unavailable ({bpf_problem}); sampling on-CPU threads "
            "with py-spy instead (Python frames only)"
        )
    return fallback
