"""`CpuCollector`: the CPU sampler that `kubeprof record` and the node agent drive.

Dataflow per poll: drain raw records from BPF (held in the ring until symbolized) ->
native frames by .eh_frame unwinding of the copied user stack (or the kernel's
frame-pointer walk where that finds more) and symbols, resolved at once (the process may
exit any moment) -> Python frames from the code objects the BPF program walked,
interleaved with the native frames at each `_PyEval_EvalFrameDefault` -> Batch. Nothing
is held back: a sample is in the batch of the poll that drained it. `stop()` drains and
hands back everything, so samples are never lost on Ctrl-C or early exit.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable

from kubeprof.agent.cpu import cpython_code, cpython_process, preflight, procfs
from kubeprof.agent.cpu.bpf_program import MAX_PY
from kubeprof.agent.cpu.cpython_code import CodeReader
from kubeprof.agent.cpu.eh_frame import END, Rule
from kubeprof.agent.cpu.merge import interleave
from kubeprof.agent.cpu.native_unwind import Memo, unwind
from kubeprof.agent.cpu.offcpu_probe import OffCpuKnobs, blocked_threads, state_name
from kubeprof.agent.cpu.records import on_cpu, waiting
from kubeprof.agent.cpu.sampler import RawRecord, Sampler
from kubeprof.agent.cpu.stack_roots import RootMemo
from kubeprof.agent.cpu.symbolize import Symbolizer
from kubeprof.agent.cpu.syscalls import syscall_name
from kubeprof.model import Batch, CpuSample, Frame, OffCpuSample, OffCpuSource, ProcessInfo, Stack
from kubeprof.protocol.settings import DEFAULT_CPU_HZ

_SCAN_S = 2.0  # how often the kernel's target set and drop counter are read
_CACHE_MAX = 1 << 15  # distinct native stacks remembered (dropped whole past this)
_MEMOS_MAX = 1024  # processes with unwind memos (dropped whole past this)
_ADD_PASSES = 4  # add_target's looks for children forked while it worked
_LOADER_WAIT_S = 1.0  # add_target's wait for ld.so to map a target's libpython
_LOADING_S = 5.0  # how long later polls look again for a libpython not yet mapped
# Per CPU sample counters (kubeprof/report/cpu_stacks.py phrases them for the reader):
# samples whose native unwind stopped before the thread's first frame, by where it stopped
# (the end of the copied stack / a frame without usable unwind tables); of those, the ones
# put back under their thread's root through the same Python stack (stack_roots.py); samples
# of a Python process's threads without a Python thread state (started by a C library,
# e.g. a BLAS pool: native frames only, nothing lost); and samples of Python threads whose
# frame walk came back empty.
COUNTERS = (
    "cpu_ustack_missing",
    "cpu_unwind_cut_stack",
    "cpu_unwind_cut_cfi",
    "cpu_unwind_rooted",
    "cpu_native_threads",
    "cpu_python_missing",
)


class CollectorError(RuntimeError):
    """A one-line message for the user: the cause and the fix."""


class CpuCollector:
    """Samples on-CPU stacks of target processes and their descendants.

    BPF is compiled and attached in the constructor (about 2 s of clang), so create the
    collector before starting a target command. `python=False` turns the Python frame
    walk off (native and kernel frames only).
    """

    cpu_source = "bpf"  # session meta: which CPU sampler produced the samples

    def __init__(
        self, hz: int = DEFAULT_CPU_HZ, *, python: bool = True, offcpu: OffCpuKnobs | None = None
    ) -> None:
        if not 1 <= hz <= 10_000:
            raise CollectorError(f"sampling rate {hz} Hz is out of range: use 1..10000 (--hz)")
        problem = preflight.check_environment()
        if problem:
            raise CollectorError(problem)
        self.offcpu = OffCpuKnobs() if offcpu is None else offcpu
        self.warnings: list[str] = []  # one-line notes for the user (target exited at once)
        try:
            self._sampler: Sampler | None = Sampler(hz, self.offcpu)
        except Exception as e:  # bcc raises bare Exceptions with compiler logs
            if not self.offcpu.enabled:
                raise CollectorError(preflight.explain_load_error(e)) from e
            # The off-CPU probe's tracepoints may be missing where the sampler works:
            # keep the on-CPU profile, say why the off-CPU one is off.
            try:
                self._sampler = Sampler(hz, None)
            except Exception as e2:  # the same cause: report it once
                raise CollectorError(preflight.explain_load_error(e2)) from e2
            first = str(e).strip().splitlines()[-1:] or ["?"]
            self.warnings.append(f"off-CPU probe off (the on-CPU sampler runs): {first[0]}")
            self.offcpu = OffCpuKnobs(min_us=self.offcpu.min_us, every=0)
        self.hz = hz
        self.lost = 0
        self._python = python
        self._symbolizer = Symbolizer()
        self._targets: set[int] = set()  # requested roots
        self._known: dict[int, str] = {}  # pid -> exe when first seen
        self._threads: set[int] = set()  # ids in the kernel's target set that are threads
        self._next_scan = 0.0
        self._native_cache: dict[tuple[int, ...], list[Frame]] = {}  # (pid, *callers) -> frames
        self._memos: dict[int, Memo] = {}  # pid -> its callers' walks (native_unwind)
        # (pid, raw Python frames) -> named groups: a loop's stacks repeat sample after sample
        self._py_cache: dict[tuple[int, tuple[int, ...]], list[list[Frame]]] = {}
        # (callers' key, leaf frame, raw Python frames) -> (user-space stack, no Python?)
        self._stack_cache: dict[tuple[object, ...], tuple[Stack, bool]] = {}
        self._roots = RootMemo()  # native frames above each outermost Python function
        self._new_procs: list[ProcessInfo] = []
        self._readers: dict[int, CodeReader] = {}
        # pid -> deadline: a python binary whose libpython ld.so has not mapped yet
        self._loading: dict[int, float] = {}
        self._ready: list[CpuSample] = []
        self._waits: list[OffCpuSample] = []
        self._offcpu_counters: dict[str, int] = {}  # the probe's totals, read every _SCAN_S
        self._sent: dict[str, int] = {}  # counter totals already handed out (batches add)
        self._backlog: deque[RawRecord] = deque()
        self._total = 0
        self._total_waits = 0
        self._counters = dict.fromkeys(COUNTERS, 0)
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
        # Each process is seen (its interpreter's layout in the BPF map) before it is
        # sampled: a sample taken in between would come without its Python frames, and
        # finding _PyRuntime takes 30-400 ms, time enough for a program started just
        # before to reach its main() (up to 11 of ~250 samples of a 2.5 s run). Children
        # forked before their parent was a target are found by the next pass (a few: a
        # tree that forks without end is not waited for); later ones join in the kernel
        # (sched_process_fork).
        added: set[int] = set()
        for _pass in range(_ADD_PASSES):
            todo = ({pid} | procfs.descendants(pid)) - added
            if not todo:
                break
            for p in sorted(todo):  # parents (lower ids, mostly) before their children
                self._see(p)
                self._await_loader(p)
                self._sampler.add_tgid(p)
                self._sampler.follow_waits(blocked_threads(p), time.monotonic_ns())
            added |= todo

    def _see(self, pid: int) -> None:
        """First sight of a process: record its info, maps, and its CPython if any."""
        if pid in self._known:
            return
        info = procfs.process_info(pid)
        exe = procfs.exe(pid)
        self._known[pid] = exe
        if info is not None:
            self._new_procs.append(info)
        self._symbolizer.refresh(pid)
        if self._python:
            self._find_python(pid)

    def _find_python(self, pid: int) -> None:
        """Tell the BPF program where this process's interpreter keeps its frames."""
        try:
            found = cpython_process.inspect(pid)
        except cpython_process.NotSupported as e:
            self.warnings.append(str(e))
            return
        old = self._readers.pop(pid, None)
        if old is not None:
            old.close()
        if self._sampler is None:
            return
        if found is None:
            self._sampler.clear_python(pid)
            if cpython_process.awaits_libpython(pid):
                self._loading.setdefault(pid, time.monotonic() + _LOADING_S)
            else:
                self._loading.pop(pid, None)
            return
        self._loading.pop(pid, None)
        self._sampler.set_python(pid, found.layout, found.runtime_addr, found.code_type)
        self._readers[pid] = CodeReader(pid, found.layout)

    def _await_loader(self, pid: int) -> None:
        """A target caught between exec() and ld.so mapping its libpython (Popen returns
        there) would be sampled without Python frames until the next look: wait the few
        ms for the loader before sampling starts (all 247 samples of a 2.5 s run, once)."""
        deadline = time.monotonic() + _LOADER_WAIT_S
        while pid in self._loading and time.monotonic() < deadline:
            time.sleep(0.002)
            self._find_python(pid)

    def _look_again(self, pids: set[int]) -> None:
        """Processes seen before their libpython was mapped (found by a poll, or exec()ed
        since) are looked at again while their samples come, for _LOADING_S at most."""
        now = time.monotonic()
        for pid in [p for p in self._loading if p in pids]:
            if now > self._loading[pid]:
                del self._loading[pid]
            else:
                self._find_python(pid)

    # -- polling -----------------------------------------------------------------------
    def poll(self) -> Batch:
        """Samples taken since the last poll, and processes first seen."""
        if self._sampler is None:
            return Batch()
        # Held: the records' stacks are read in the ring, released once all are in.
        records = self._sampler.drain(hold=True)
        pids = {r.pid for r in records}
        self._check_exec(pids)
        self._look_again(pids)
        self._recheck_codes(records)
        self._ingest(records)
        self._sampler.release()
        now = time.monotonic()
        if now >= self._next_scan:  # reading BPF maps costs ms: every _SCAN_S, not per poll
            self._next_scan = now + _SCAN_S
            self.lost = self._sampler.dropped
            self._offcpu_counters = self._sampler.offcpu_counters()
            for pid in self._sampler.tgids() - self._known.keys() - self._threads:
                if procfs.is_tgid(pid):
                    self._see(pid)
                else:  # a thread's id, added by the fork tracepoint: look once
                    self._threads.add(pid)
        return self._batch()

    def stop(self) -> Batch:
        """Final drain, BPF detached; everything not yet handed out is returned."""
        if self._stopped:
            return Batch(counters=self._counter_snapshot())
        self._stopped = True
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            with contextlib.suppress(Exception):
                last = sampler.drain(hold=True)  # the ring is closed after this
                self._recheck_codes(last)
                self._ingest(last)
            with contextlib.suppress(Exception):  # whatever an interrupted poll left
                self._ingest([])
            with contextlib.suppress(Exception):
                self.lost = sampler.dropped
            with contextlib.suppress(Exception):
                self._offcpu_counters = sampler.offcpu_counters()
            with contextlib.suppress(Exception):
                self._open_waits(sampler.open_waits(time.monotonic_ns()))
            with contextlib.suppress(Exception):
                sampler.close()
        for reader in self._readers.values():
            reader.close()
        batch = self._batch()
        if self._targets and not self._total and not self._total_waits:
            pids = ", ".join(map(str, sorted(self._targets)))
            self.warnings.append(
                f"no CPU samples for PID {pids}: it exited or slept before the first sample "
                f"({1000 // self.hz} ms at {self.hz} Hz); give it more on-CPU work or a higher --hz"
            )
        return batch

    def _recheck_codes(self, records: list[RawRecord]) -> None:
        """Before a poll's samples are named: is every code object they name still the one
        cached at its address? (A freed one's memory is reused: CodeReader.recheck.)"""
        addrs: dict[int, set[int]] = {}
        for pid, words in {(r.pid, r.py_words) for r in records if r.py_words}:
            addrs.setdefault(pid, set()).update(words[0::3])
        changed = False
        for pid, codes in addrs.items():
            reader = self._readers.get(pid)
            changed = (reader is not None and reader.recheck(codes)) or changed
        if changed:
            self._py_cache.clear()  # frame chains named from the old objects
            self._stack_cache.clear()

    def _check_exec(self, pids: set[int]) -> None:
        """A process that exec()ed since first seen (a pyenv shim becoming python, a
        fork about to run a tool) gets fresh maps, a new ProcessInfo and its new
        interpreter's layout (or none)."""
        for pid in pids:
            exe = procfs.exe(pid)
            if not exe or exe == self._known.get(pid):
                continue
            self._known.pop(pid, None)
            self._native_cache.clear()  # its addresses mean other code now
            self._py_cache.clear()
            self._stack_cache.clear()
            self._memos.pop(pid, None)
            self._roots.forget(pid)
            self._see(pid)

    def _ingest(self, records: list[RawRecord]) -> None:
        # Records wait in a backlog until symbolized, so a KeyboardInterrupt in the
        # middle of a poll loses none of them: stop() picks up where this left off.
        self._backlog.extend(records)
        while self._backlog:
            rec = self._backlog[0]
            self._see(rec.pid)
            if rec.off:
                self._waits.append(self._wait(rec))
            else:
                self._ready.append(self._sample(rec))
            self._backlog.popleft()

    def _native(self, rec: RawRecord) -> tuple[tuple[int, ...], list[Frame], Frame | None, str]:
        """(callers' key, root-first callers' frames, leaf frame, cut) of the native
        stack: .eh_frame unwind, or the kernel's frame-pointer walk where that stopped
        short and the kernel's walk found more (code built with frame pointers but odd
        unwind tables). `cut`: "" where the walk reached the thread's first frame, else
        where it stopped ("stack": the end of the copy; "cfi": no usable unwind rule). No
        leaf: no native stack."""
        sym = self._symbolizer
        rule_at = sym.rules_of(rec.pid)
        pcs: list[int] = []
        if rec.stack:
            memo = self._memos.get(rec.pid)
            if memo is None:
                if len(self._memos) >= _MEMOS_MAX:
                    self._memos.clear()
                memo = self._memos[rec.pid] = {}
            pcs = unwind(rec.regs, rec.stack, rule_at, memo)
        cut = _cut(pcs, rule_at)
        if (cut or not pcs) and len(rec.ustack) > len(pcs):
            # Where rbp is a data register (no frame pointers) the kernel's walk follows
            # whatever it points at: up to 127 made-up addresses. Keep it only up to its
            # first address outside the process's code, and only where it is longer.
            walked = list(rec.ustack)
            for i, pc in enumerate(walked):
                if not sym.in_code(rec.pid, pc):
                    del walked[i:]
                    break
            if len(walked) > len(pcs):
                pcs, cut = walked, _cut(walked, rule_at)
        if not pcs:
            if not rec.off:
                self._counters["cpu_ustack_missing"] += 1
            return (rec.pid,), [], None, ""
        # The leaf is wherever the sample hit (any instruction of a hot function: 225 of
        # 600 samples of an interpreter loop had their own), its callers repeat (13):
        # cache the callers' frames and add the leaf's, itself cached per function.
        key = (rec.pid, *pcs[1:])
        callers = self._native_cache.get(key)
        if callers is None:
            if len(self._native_cache) > _CACHE_MAX:
                self._native_cache.clear()
            callers = self._native_cache[key] = sym.user_stack(rec.pid, pcs[1:], callers=True)
        return key, callers, sym.user_frame(rec.pid, pcs[0]), cut

    def _python_groups(self, rec: RawRecord, reader: CodeReader) -> list[list[Frame]]:
        """The sample's Python frames, grouped per interpreter invocation (cached per
        raw frame chain)."""
        key = (rec.pid, rec.py_words)
        cached = self._py_cache.get(key)
        if cached is None:
            cached = []
            for raw_group in cpython_code.groups(list(rec.python), reader.layout):
                frames = [f for raw in reversed(raw_group) if (f := reader.frame(raw))]
                if frames:
                    cached.append(frames)
            if len(self._py_cache) > _CACHE_MAX:
                self._py_cache.clear()
            self._py_cache[key] = cached
        return cached

    def _open_waits(self, waits: list[tuple[int, int, int, int]]) -> None:
        """Waits still under way at the end, of threads alive and ours: reported with
        their time so far and no stack (it is taken only as a wait ends)."""
        every = max(self.offcpu.every, 1)
        for tid, start, blocked, nr in waits:
            pid = procfs.tgid_of(tid)
            if pid is None or pid not in self._known or nr < 0:
                continue
            if blocked < self.offcpu.min_us * 1000:
                continue
            self._total_waits += 1
            self._counters["offcpu_open_at_end"] = self._counters.get("offcpu_open_at_end", 0) + 1
            self._waits.append(
                OffCpuSample(
                    ts_ns=start,
                    pid=pid,
                    tid=tid,
                    thread=procfs.comm(tid),
                    blocked_ns=blocked,
                    weight_ns=blocked * every,
                    reason=syscall_name(nr),
                    source=OffCpuSource.BPF_SCHED.value,
                    stack=(),
                )
            )

    def _wait(self, rec: RawRecord) -> OffCpuSample:
        """An off-CPU record: the stack it waited in and why (the syscall, else its state)."""
        self._total_waits += 1
        reason = syscall_name(rec.syscall_nr) if rec.syscall_nr >= 0 else state_name(rec.state)
        weight = rec.blocked_ns * max(self.offcpu.every, 1)
        stack = self._user_stack(rec)
        return waiting(rec, rec.blocked_ns, weight, reason, OffCpuSource.BPF_SCHED, stack)

    def _sample(self, rec: RawRecord) -> CpuSample:
        stack = self._user_stack(rec)
        if rec.kstack:
            stack = (*stack, *self._symbolizer.kernel_stack(rec.kstack))
        self._total += 1
        return on_cpu(rec, rec.cpu, stack)

    def _user_stack(self, rec: RawRecord) -> Stack:
        """Native frames with the Python frames interleaved, root first (cached); a stack
        cut short is marked, and rooted through its Python stack where that is known."""
        callers_key, callers, leaf, cut = self._native(rec)
        # The user-space stack is a function of (callers, leaf function, Python chain):
        # a loop's samples repeat it, so the interleaving is done once per combination.
        key = (callers_key, leaf, rec.py_words)
        user = self._stack_cache.get(key)
        if user is None:
            reader = self._readers.get(rec.pid)
            groups = self._python_groups(rec, reader) if reader is not None else []
            native = [*callers, leaf] if leaf is not None else []
            stack = interleave(groups, native, (), unwound=not cut)
            user = (stack, reader is not None and not groups)
            if len(self._stack_cache) > _CACHE_MAX:
                self._stack_cache.clear()
            self._stack_cache[key] = user
            if not cut:
                self._roots.learn(rec.pid, stack)
        stack, python_missing = user
        seen: list[str] = []  # what this sample counts in, if it is a CPU sample
        if python_missing:
            gone = rec.python_err < 0  # no thread state: a thread CPython never ran
            seen.append("cpu_native_threads" if gone else "cpu_python_missing")
        if cut:
            seen.append(f"cpu_unwind_cut_{cut}")
            # The whole chain walked (not cut at MAX_PY): its first frame is the thread's.
            whole = len(rec.py_words) < 3 * MAX_PY
            rooted = self._roots.rooted(rec.pid, stack) if whole else None
            if rooted is not None:
                seen.append("cpu_unwind_rooted")
                stack = rooted
        if not rec.off:
            for name in seen:
                self._counters[name] += 1
        return stack

    def _batch(self) -> Batch:
        ready, self._ready = tuple(self._ready), []
        waits, self._waits = tuple(self._waits), []
        procs, self._new_procs = tuple(self._new_procs), []
        return Batch(
            samples=ready, processes=procs, counters=self._counter_snapshot(), offcpu_samples=waits
        )

    def _counter_snapshot(self) -> dict[str, int]:
        """What the counters grew by since the last batch: the store adds them up."""
        totals = {"cpu_lost": self.lost, **self._counters, **self._offcpu_counters}
        out = {k: v - self._sent.get(k, 0) for k, v in totals.items() if v != self._sent.get(k, 0)}
        self._sent.update(totals)
        return out


def _cut(pcs: list[int], rule_at: Callable[[int], Rule | None]) -> str:
    """ "" where a walk (leaf first) ended at the thread's first frame (`_start`, `clone3`:
    the END rule), else why it stopped: "cfi" (its last frame has no usable unwind rule)
    or "stack" (it had one: the walk ran off the copied stack)."""
    if not pcs:
        return ""
    rule = rule_at(pcs[0] if len(pcs) == 1 else pcs[-1] - 1)
    if rule is None:
        return "cfi"
    return "" if rule.cfa_reg == END else "stack"
