"""`CpuCollector`: the CPU sampler that `kubeprof record` and the node agent drive.

Dataflow per poll: drain raw records from BPF -> symbolize native and kernel frames at
once (the process may exit any moment) -> hold samples of Python processes until
py-spy's segment covering their time is parsed -> join (merge.merge_stack) -> Batch.
`stop()` drains, finishes py-spy and hands back everything still held, so samples are
never lost on Ctrl-C or early exit.
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass

from kubeprof.agent.cpu import preflight, procfs
from kubeprof.agent.cpu.merge import is_interpreter_path, merge_stack
from kubeprof.agent.cpu.python_stacks import PythonUnwinder
from kubeprof.agent.cpu.sampler import RawRecord, Sampler
from kubeprof.agent.cpu.symbolize import Symbolizer
from kubeprof.model import Batch, CpuSample, Frame, FrameKind, ProcessInfo
from kubeprof.protocol.settings import DEFAULT_CPU_HZ


class CollectorError(RuntimeError):
    """A one-line message for the user: the cause and the fix."""


@dataclass(slots=True)
class _Held:
    """A sample symbolized on the native side, waiting for its Python frames."""

    rec: RawRecord
    native: list[Frame]
    kernel: list[Frame]


class CpuCollector:
    """Samples on-CPU stacks of target processes and their descendants.

    BPF is compiled and attached in the constructor (about 2 s of clang), so create the
    collector before starting a target command. `python=False` turns py-spy off;
    `pyspy_native=True` lets py-spy pause the target to interleave native frames itself
    (costlier, see UNWINDER.md); `segment_s` is how long one py-spy run lasts, i.e. the
    latency of Python samples; `pyspy_hz` is py-spy's own rate (default: hz; twice
    that bought only ~3 points of join accuracy here, see UNWINDER.md).
    """

    cpu_source = "bpf"  # session meta: which CPU sampler produced the samples

    def __init__(
        self,
        hz: int = DEFAULT_CPU_HZ,
        *,
        python: bool = True,
        pyspy_native: bool = False,
        segment_s: float = 4.0,
        pyspy_hz: int | None = None,
    ) -> None:
        if not 1 <= hz <= 10_000:
            raise CollectorError(f"sampling rate {hz} Hz is out of range: use 1..10000 (--hz)")
        problem = preflight.check_environment()
        if problem:
            raise CollectorError(problem)
        try:
            self._sampler: Sampler | None = Sampler(hz)
        except Exception as e:  # bcc raises bare Exceptions with compiler logs
            raise CollectorError(preflight.explain_load_error(e)) from e
        self.hz = hz
        self.lost = 0
        self.warnings: list[str] = []  # one-line notes for the user (target exited at once)
        self._python, self._pyspy_native, self._segment_s = python, pyspy_native, segment_s
        self._pyspy_hz = pyspy_hz or hz
        self._symbolizer = Symbolizer()
        self._targets: set[int] = set()  # requested roots
        self._known: dict[int, str] = {}  # pid -> exe when first seen
        self._new_procs: list[ProcessInfo] = []
        self._unwinders: dict[int, PythonUnwinder] = {}
        self._held: list[_Held] = []
        self._backlog: deque[RawRecord] = deque()
        self._total = 0
        self._counters = {"cpu_ustack_missing": 0, "cpu_python_unjoined": 0}
        self._stopped = False

    # -- targets -----------------------------------------------------------------------
    def add_target(self, pid: int) -> None:
        """Profile pid and every descendant (existing ones now, later ones on fork)."""
        if self._sampler is None:
            raise CollectorError("the CPU collector is stopped: create a new one")
        problem = preflight.pid_problem(pid)
        if problem:
            raise CollectorError(problem)
        self._targets.add(pid)
        for p in {pid} | procfs.descendants(pid):
            self._sampler.add_tgid(p)
            self._see(p)

    def _see(self, pid: int) -> None:
        """First sight of a process: record its info, maps, and start py-spy if Python."""
        if pid in self._known:
            return
        info = procfs.process_info(pid)
        exe = procfs.exe(pid)
        self._known[pid] = exe
        if info is not None:
            self._new_procs.append(info)
        self._symbolizer.refresh(pid)
        if self._python and self._is_python(pid, exe) and pid not in self._unwinders:
            try:
                self._unwinders[pid] = PythonUnwinder(
                    pid, self._pyspy_hz, self._segment_s, native=self._pyspy_native
                )
            except OSError as e:
                self.warnings.append(f"no Python frames for PID {pid}: {e}")

    @staticmethod
    def _is_python(pid: int, exe: str) -> bool:
        if is_interpreter_path(exe):
            return True
        try:
            with open(f"/proc/{pid}/maps") as f:
                return "libpython" in f.read()
        except OSError:
            return False

    # -- polling -----------------------------------------------------------------------
    def poll(self) -> Batch:
        """New samples and processes since the last poll (Python samples lag a segment)."""
        if self._sampler is None:
            return Batch()
        records = self._sampler.drain()
        self._check_exec({r.pid for r in records})
        self._ingest(records)
        for pid in self._sampler.tgids() - self._known.keys():
            if procfs.is_tgid(pid):
                self._see(pid)
        for pid, unwinder in self._unwinders.items():
            unwinder.tick(procfs.is_alive(pid))
        return self._batch(final=False)

    def stop(self) -> Batch:
        """Final drain, py-spy finished, BPF detached; everything held is returned."""
        if self._stopped:
            return Batch(counters=self._counter_snapshot())
        self._stopped = True
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            with contextlib.suppress(Exception):
                self._ingest(sampler.drain())
            with contextlib.suppress(Exception):  # whatever an interrupted poll left
                self._ingest([])
            with contextlib.suppress(Exception):
                self.lost = sampler.dropped
        for unwinder in self._unwinders.values():
            with contextlib.suppress(Exception):
                unwinder.stop()
        if sampler is not None:
            with contextlib.suppress(Exception):
                sampler.close()
        batch = self._batch(final=True)
        if self._targets and not self._total:
            pids = ", ".join(map(str, sorted(self._targets)))
            self.warnings.append(
                f"no CPU samples for PID {pids}: it exited or slept before the first sample "
                f"({1000 // self.hz} ms at {self.hz} Hz); give it more on-CPU work or a higher --hz"
            )
        return batch

    def _check_exec(self, pids: set[int]) -> None:
        """A process that exec()ed since first seen (a pyenv shim becoming python, a
        fork about to run a tool) gets fresh maps, a new ProcessInfo and, if it is
        Python now, a py-spy."""
        for pid in pids:
            exe = procfs.exe(pid)
            if not exe or exe == self._known.get(pid):
                continue
            self._known.pop(pid, None)
            old = self._unwinders.get(pid)
            if old is not None:
                old.stop()  # done: held samples are released with what it saw
                if self._python and self._is_python(pid, exe):
                    del self._unwinders[pid]  # a new py-spy for the new program
            self._see(pid)

    def _ingest(self, records: list[RawRecord]) -> None:
        # Records wait in a backlog until symbolized, so a KeyboardInterrupt in the
        # middle of a poll loses none of them: stop() picks up where this left off.
        self._backlog.extend(records)
        while self._backlog:
            rec = self._backlog[0]
            self._see(rec.pid)
            if rec.ustack_err:
                self._counters["cpu_ustack_missing"] += 1
            native = self._symbolizer.user_stack(rec.pid, rec.ustack)
            kernel = self._symbolizer.kernel_stack(rec.kstack)
            self._held.append(_Held(rec, native, kernel))
            self._backlog.popleft()

    def _batch(self, final: bool) -> Batch:
        ready: list[CpuSample] = []
        keep: list[_Held] = []
        for h in self._held:
            unwinder = self._unwinders.get(h.rec.pid)
            if unwinder is None:
                ready.append(self._sample(h, None))
            elif h.rec.ts_ns <= unwinder.covered_until_ns or unwinder.done or final:
                py = unwinder.stack_at(h.rec.tid, h.rec.ts_ns, unwinder.period_ns)
                if not py:
                    self._counters["cpu_python_unjoined"] += 1
                elif self._pyspy_native:
                    py = self._resolve_hex(h.rec.pid, py)
                ready.append(self._sample(h, py))
            else:
                keep.append(h)
        self._held = keep
        procs, self._new_procs = tuple(self._new_procs), []
        return Batch(samples=tuple(ready), processes=procs, counters=self._counter_snapshot())

    def _sample(self, h: _Held, python: tuple[Frame, ...] | None) -> CpuSample:
        rec = h.rec
        self._total += 1
        return CpuSample(
            ts_ns=rec.ts_ns,
            pid=rec.pid,
            tid=rec.tid,
            thread=rec.comm,
            cpu=rec.cpu,
            stack=merge_stack(python, h.native, h.kernel),
        )

    def _resolve_hex(self, pid: int, stack: tuple[Frame, ...]) -> tuple[Frame, ...]:
        """Name the bare addresses py-spy --native leaves for static functions."""
        out = []
        for f in stack:
            if f.kind is FrameKind.NATIVE and f.name.startswith("0x"):
                named = self._symbolizer.user_frame(pid, int(f.name, 16) - 1)
                if named.name != "[unknown]":
                    f = Frame(named.name, FrameKind.NATIVE, f.file)
            out.append(f)
        return tuple(out)

    def _counter_snapshot(self) -> dict[str, int]:
        if self._sampler is not None:
            with contextlib.suppress(Exception):
                self.lost = self._sampler.dropped
        return {"cpu_lost": self.lost, **self._counters}
