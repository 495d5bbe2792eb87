"""A quick start for `kubeprof record`: py-spy samples while the BPF sampler compiles.

Building the BPF sampler means clang compiling its C program: 2-3 CPU-seconds, more on a
loaded machine. Waiting for it before starting the command made a 3 s script take 6-9 s
under `kubeprof record`. Instead the command starts at once and py-spy (no compile, Python
frames only) samples it from its first instant, while the BPF program compiles on another
thread (bcc's compile is a C call: the GIL is released). At the first poll after the BPF
sampler is ready the targets move to it: py-spy stops, its samples taken before the
handover are kept and the later ones dropped, so every instant is sampled once. If BPF
cannot load here, py-spy goes on for the whole run, as `open_cpu_collector` would choose.

``session_meta()`` says which sampler covered what (``cpu_source`` and ``cpu_handover_s``,
seconds from the start to the handover), and the report's header says it in words.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Sequence

from kubeprof.agent.cpu.collector import CollectorError, CpuCollector
from kubeprof.agent.cpu.offcpu_probe import OffCpuKnobs
from kubeprof.agent.cpu.pyspy_collector import PyspyCollector
from kubeprof.model import Batch

BpfFactory = Callable[[], CpuCollector]


class HandoverCollector:
    """The CPU collector of `kubeprof record`: py-spy first, BPF once compiled."""

    def __init__(
        self,
        pyspy: PyspyCollector,
        build_bpf: BpfFactory,
        log: Callable[[str], None],
    ) -> None:
        self._pyspy: PyspyCollector | None = pyspy
        self._bpf: CpuCollector | None = None
        self._bpf_problem = ""
        self._log = log
        self._targets: list[int] = []
        self._start_ns = time.monotonic_ns()
        self._handover_ns: int | None = None
        self._stopped = False
        self._lock = threading.Lock()  # `stop` against the compile finishing
        self._ready = threading.Event()
        self._thread = threading.Thread(
            target=self._compile, args=(build_bpf,), name="kubeprof-bpf-compile", daemon=True
        )
        self._thread.start()
        self.warnings: list[str] = []

    @property
    def cpu_source(self) -> str:
        """The sampler that covers the run from now on ("py-spy" until the handover)."""
        return "bpf" if self._handover_ns is not None else "py-spy"

    def _compile(self, build_bpf: BpfFactory) -> None:
        """Build the BPF sampler; one finished after `stop` is unloaded at once (a short
        command does not wait for a compile it will never use)."""
        try:
            bpf = build_bpf()
        except CollectorError as exc:
            self._bpf_problem = str(exc)
        except Exception as exc:  # noqa: BLE001 - any failure leaves py-spy in charge
            self._bpf_problem = f"{type(exc).__name__}: {exc}"
        else:
            with self._lock:
                late = self._stopped
                if not late:
                    self._bpf = bpf
            if late:
                bpf.stop()
        finally:
            self._ready.set()

    # -- targets -----------------------------------------------------------------------
    def add_target(self, pid: int) -> None:
        """Profile pid and its descendants: with py-spy now, with BPF from the handover."""
        if self._stopped:
            raise CollectorError("the CPU collector is stopped: create a new one")
        if self._handover_ns is not None and self._bpf is not None:
            self._bpf.add_target(pid)
        elif self._pyspy is not None:
            self._pyspy.add_target(pid)
        self._targets.append(pid)

    # -- polling -----------------------------------------------------------------------
    def poll(self) -> Batch:
        """Records since the last poll; hands the targets to BPF when it has compiled."""
        if self._stopped:
            return Batch()
        if self._handover_ns is None and self._ready.is_set():
            return self._hand_over()
        if self._handover_ns is not None and self._bpf is not None:
            return self._bpf.poll()
        return self._pyspy.poll() if self._pyspy is not None else Batch()

    def _hand_over(self) -> Batch:
        """BPF takes the targets; py-spy's samples up to that instant are kept."""
        if self._bpf is None:  # BPF cannot load here: py-spy runs to the end
            self._say_unavailable()
            return self._pyspy.poll() if self._pyspy is not None else Batch()
        from kubeprof.agent.driver import merge

        for pid in self._targets:
            try:
                self._bpf.add_target(pid)
            except CollectorError:  # exited meanwhile: py-spy has what there was
                continue
        self._handover_ns = time.monotonic_ns()
        pyspy, self._pyspy = self._pyspy, None
        if pyspy is None:
            return self._bpf.poll()
        before = _until(pyspy.stop(), self._handover_ns)
        self.warnings += [w for w in pyspy.warnings if not w.startswith("no CPU samples")]
        return merge([before, self._bpf.poll()])

    def _say_unavailable(self) -> None:
        """Tell once that BPF cannot load and py-spy covers the run (cleared `_ready`
        marks it said)."""
        self._log(
            f"kubeprof: BPF CPU sampler unavailable ({self._bpf_problem}); sampling "
            "with py-spy instead (Python frames only)"
        )
        self._ready.clear()

    def stop(self) -> Batch:
        """Stop whichever sampler runs; a compile still under way unloads its program
        when it ends (`_compile`). A failed compile no poll reported yet (a run that
        ended before its first poll: the store opened late) is told here."""
        with self._lock:
            if self._stopped:
                return Batch()
            self._stopped = True
            bpf = self._bpf
        if bpf is None and self._ready.is_set() and self._bpf_problem:
            self._say_unavailable()  # (a compile that succeeded after the lock is no problem)
        if self._handover_ns is not None and bpf is not None:
            out = bpf.stop()
            self.warnings += bpf.warnings
            return out
        if bpf is not None:  # compiled, never handed over
            bpf.stop()
        out = self._pyspy.stop() if self._pyspy is not None else Batch()
        if self._pyspy is not None:
            self.warnings += self._pyspy.warnings
        return out

    def session_meta(self) -> dict[str, str]:
        """Which sampler covered the run: ``cpu_source`` and, after a handover,
        ``cpu_handover_s`` (py-spy sampled the first that many seconds); without one,
        ``cpu_bpf`` says why (``compiling``: the run ended first; else BPF's problem)."""
        if self._handover_ns is None:
            return {"cpu_source": "py-spy", "cpu_bpf": self._bpf_problem or "compiling"}
        return {
            "cpu_source": "bpf",
            "cpu_handover_s": f"{(self._handover_ns - self._start_ns) / 1e9:.2f}",
        }


def _until(batch: Batch, end_ns: int) -> Batch:
    """The batch's samples (on and off CPU) taken before ``end_ns``; the rest as is."""
    from dataclasses import replace

    return replace(
        batch,
        samples=tuple(s for s in batch.samples if s.ts_ns < end_ns),
        offcpu_samples=tuple(w for w in batch.offcpu_samples if w.ts_ns < end_ns),
    )


_INTERPRETER = re.compile(r"python[\d.]*")  # python, python3, python3.11: a file's base name


def pid_runs_python(pid: int) -> bool:
    """True when process `pid`'s executable is a Python interpreter (`record --pid`)."""
    from kubeprof.agent.cpu.procfs import exe

    return bool(_INTERPRETER.fullmatch(os.path.basename(exe(pid))))


def runs_python(command: Sequence[str]) -> bool:
    """True when `command` starts a Python interpreter: `python3 ...`, or a script whose
    `#!` line names one (torchrun, a console script). py-spy only sees Python, so other
    commands wait for the BPF sampler instead of a quick start."""
    if not command:
        return False
    if _INTERPRETER.fullmatch(os.path.basename(command[0])):
        return True
    path = shutil.which(command[0])
    if path is None:
        return False
    try:
        with open(path, "rb") as f:
            first = f.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def open_quick(hz: int, log: Callable[[str], None], offcpu: OffCpuKnobs) -> HandoverCollector:
    """The handover collector; raises `PyspyCollectorError` where py-spy cannot run (the
    caller then builds the BPF sampler and waits for it, as before)."""
    pyspy = PyspyCollector(hz, idle=offcpu.enabled)
    return HandoverCollector(pyspy, lambda: CpuCollector(hz=hz, offcpu=offcpu), log)
