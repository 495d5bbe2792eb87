"""JAX/XLA kernels credited to the Python line of the op they compute.

XLA launches a jitted function's kernels from its own threads, where no Python frame runs,
so the launch callback can only show the main thread's stack. But XLA names each kernel
after the HLO instruction it computes (`%loop_add_fusion.2` runs as `loop_add_fusion_2`),
and every optimised HLO module, dumped as text (``XLA_FLAGS=--xla_dump_to=DIR
--xla_dump_hlo_as_text``), carries for each instruction its JAX op name
(``jit(train_step)/transpose(jvp(forward))/dot_general``) and the whole Python stack that
traced it (the FileNames / FunctionNames / FileLocations / StackFrames tables). Joining the
kernel name to that instruction gives the jitted function, the op and its source line.

The entry computation of an optimised module is printed in the order it runs
(``is_scheduled=true``), so each stream's kernels are followed through that schedule: a
kernel name that several identical fusions share (``deduplicated_name``) is the next step of
that name after the stream's last one (wrapping to the module's start when it runs again);
a kernel XLA hands to a library (a custom call into cuBLAS runs as `nvjet_*`) is the custom
call scheduled right after the stream's last step, one kernel per call (as every cuBLAS call
of the H200 recording launched). XLA's own helper kernels (autotuning, buffer checks) and
anything else keep the fallback rather than a guess.
"""

from __future__ import annotations

import gzip
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from kubeprof.analysis.gpu_attribution import XLA_PREFIX
from kubeprof.model import Frame, FrameKind, Stack

DUMP_SUFFIX = "after_optimizations.txt"  # the optimised module, as the GPU runs it

_TABLE = re.compile(r"^(FileNames|FunctionNames|FileLocations|StackFrames)$")
_STRING_ROW = re.compile(r'^(\d+) "(.*)"$')
_LOC_ROW = re.compile(r"^(\d+) \{file_name_id=(\d+) function_name_id=(\d+) line=(\d+)")
_FRAME_ROW = re.compile(r"^(\d+) \{file_location_id=(\d+) parent_frame_id=(\d+)")
_INSTR = re.compile(r"^\s*(ROOT )?%([\w.\-]+) = ")
_CALLS = re.compile(r"calls=%([\w.\-]+)")
_META = re.compile(r'metadata=\{op_name="([^"]*)"(?:[^}]*?stack_frame_id=(\d+))?')
_DEDUP = re.compile(r'deduplicated_name="([^"]+)"')
_COMPUTATION = re.compile(r"^(?:ENTRY )?%([\w.\-]+) \(")


@dataclass(frozen=True, slots=True)
class Step:
    """One instruction of a module's entry computation, in the order it runs."""

    kernel: str  # the kernel name it launches under ("" for a custom call into a library)
    op: XlaOp | None


@dataclass(frozen=True, slots=True)
class XlaOp:
    """One HLO instruction as a kernel of it is charged: module, JAX op, Python stack."""

    module: str  # e.g. "jit_train_step"
    op_name: str  # e.g. "jit(train_step)/transpose(jvp(forward))/dot_general"
    stack: Stack  # Python frames root first ((), when the module kept no stack)


def kernel_name(instruction: str) -> str:
    """The name XLA gives the kernel of an instruction (LLVM-safe: '.' and '-' to '_')."""
    return instruction.replace(".", "_").replace("-", "_")


def parse_module(text: str) -> tuple[str, list[Step]]:
    """(module name, the entry computation's kernel-launching steps in the order they run)
    of one optimised HLO module dumped as text.

    A fusion's own line often lacks metadata; then its fused computation's ROOT names the op.
    Identical fusions share one kernel, named after the first (``deduplicated_name``).
    """
    lines = text.splitlines()
    module = lines[0].split()[1].rstrip(",") if lines and lines[0].startswith("HloModule") else ""
    files: dict[int, str] = {}
    funcs: dict[int, str] = {}
    locs: dict[int, tuple[int, int, int]] = {}
    frames: dict[int, tuple[int, int]] = {}
    table = ""
    meta: dict[str, tuple[str, int]] = {}  # instruction -> (op_name, stack_frame_id)
    calls: dict[str, str] = {}  # fusion instruction -> fused computation
    dedup: dict[str, str] = {}  # instruction -> the instruction whose kernel it runs
    root_of: dict[str, str] = {}  # computation -> its ROOT instruction
    computation = ""
    entry = ""
    order: list[tuple[str, str]] = []  # entry computation: (instruction, "fusion"|"custom")
    for line in lines[1:]:
        m = _TABLE.match(line)
        if m:
            table = m.group(1)
            continue
        if not line.strip():
            table = ""
            continue
        if table:
            if table in ("FileNames", "FunctionNames") and (s := _STRING_ROW.match(line)):
                (files if table == "FileNames" else funcs)[int(s.group(1))] = s.group(2)
            elif table == "FileLocations" and (loc := _LOC_ROW.match(line)):
                locs[int(loc.group(1))] = (int(loc.group(2)), int(loc.group(3)), int(loc.group(4)))
            elif table == "StackFrames" and (fr := _FRAME_ROW.match(line)):
                frames[int(fr.group(1))] = (int(fr.group(2)), int(fr.group(3)))
            continue
        c = _COMPUTATION.match(line)
        if c:
            computation = c.group(1)
            if line.startswith("ENTRY "):
                entry = computation
            continue
        ins = _INSTR.match(line)
        if not ins:
            continue
        name = ins.group(2)
        if ins.group(1):
            root_of[computation] = name
        call = _CALLS.search(line)
        if call:
            calls[name] = call.group(1)
        mm = _META.search(line)
        if mm:
            meta[name] = (mm.group(1), int(mm.group(2) or 0))
        dd = _DEDUP.search(line)
        if dd:
            dedup[name] = dd.group(1)
        if computation and computation == entry:
            if " fusion(" in line:
                order.append((name, "fusion"))
            elif " custom-call(" in line:
                order.append((name, "custom"))

    def stack(frame_id: int) -> Stack:
        out: list[Frame] = []
        seen: set[int] = set()
        while frame_id and frame_id not in seen and frame_id in frames:
            seen.add(frame_id)
            loc_id, parent = frames[frame_id]
            file_id, func_id, line_no = locs.get(loc_id, (0, 0, 0))
            out.append(
                Frame(funcs.get(func_id, "?"), FrameKind.PYTHON, files.get(file_id, ""), line_no)
            )
            # The dump prints a frame's parent one past its row (1 names no parent);
            # checked on JAX 0.10/0.11 dumps against the source columns of each call.
            frame_id = parent - 1
        return tuple(reversed(out))

    def op_of(name: str) -> XlaOp | None:
        found = meta.get(name)
        if found is None and name in calls:
            found = meta.get(root_of.get(calls[name], ""))
        return None if found is None else XlaOp(module, found[0], stack(found[1]))

    # Identical fusions run one kernel, compiled for (and named after) the first of them
    # in the schedule; the text's deduplicated_name only groups them (on the H200's dumps
    # it names another member of the group than the kernel's).
    first: dict[str, str] = {}
    for n, _kind in order:
        if n in dedup:
            first.setdefault(dedup[n], n)
    steps = [
        Step(kernel_name(first.get(dedup.get(n, ""), n)) if kind == "fusion" else "", op_of(n))
        for n, kind in order
    ]
    return module, steps


def library_step(steps: list[Step], after: int) -> int | None:
    """The step of a library kernel launched after step `after`: the custom call scheduled
    next, if the next step is one; else None."""
    nxt = after + 1
    if nxt < len(steps) and not steps[nxt].kernel and steps[nxt].op is not None:
        return nxt
    return None


_XLA_OWN = re.compile(r"(_ZN15stream_executor|.*fusion|wrapped_|triton_|loop_|input_)")


def is_library_kernel(kernel: str) -> bool:
    """Not a kernel XLA generates itself (fusions) or runs for its own upkeep."""
    return _XLA_OWN.match(kernel) is None


class XlaIndex:
    """Every module dumped into a folder so far, and where each kernel name runs in them.

    Modules are dumped when compiled, before their kernels run; a name not known yet makes
    the folder be looked at again (at most every `rescan_s`)."""

    def __init__(self, folder: str | Path, *, rescan_s: float = 0.5) -> None:
        self.folder = Path(folder)
        self.rescan_s = rescan_s
        self.modules = 0
        self._steps: dict[str, list[Step]] = {}  # module file -> its schedule
        self._where: dict[str, list[tuple[str, int]]] = {}  # kernel -> its steps
        self._read: set[str] = set()
        self._scanned = float("-inf")

    def place(self, kernel: str, last: tuple[str, int] | None) -> tuple[str, int] | None:
        """The step a kernel of this name is, given the step its stream ran last: the next
        step of that name in the same module (or its first there: the module runs again);
        else its first step when all of them are in one module; else unknown."""
        where = self._where.get(kernel)
        if where is None:
            now = time.monotonic()
            if now - self._scanned < self.rescan_s:
                return None
            self._scanned = now
            self.scan()
            where = self._where.get(kernel)
            if where is None:
                return None
        if last is not None:
            same = [p for p in where if p[0] == last[0]]
            nxt = [p for p in same if p[1] > last[1]]
            if nxt:
                return nxt[0]
            if same:  # the module runs again from the start
                return same[0]
        if len({m for m, _ in where}) == 1:
            return where[0]
        return None

    def op(self, pos: tuple[str, int]) -> XlaOp | None:
        return self._steps[pos[0]][pos[1]].op

    def after(self, pos: tuple[str, int]) -> tuple[str, int] | None:
        """The step of a library kernel launched after the step at `pos` (library_step)."""
        nxt = library_step(self._steps[pos[0]], pos[1])
        return None if nxt is None else (pos[0], nxt)

    def scan(self) -> None:
        """Read the modules dumped since the last scan."""
        try:
            names = sorted(
                n for n in os.listdir(self.folder) if n.endswith((DUMP_SUFFIX, DUMP_SUFFIX + ".gz"))
            )
        except OSError:
            return
        for n in names:
            if n in self._read:
                continue
            self._read.add(n)
            try:
                path = self.folder / n
                raw = gzip.decompress(path.read_bytes()) if n.endswith(".gz") else path.read_bytes()
                text = raw.decode(errors="replace")
            except OSError:
                continue
            _module, steps = parse_module(text)
            self.modules += 1
            self._steps[n] = steps
            for i, step in enumerate(steps):
                if step.kernel:
                    self._where.setdefault(step.kernel, []).append((n, i))


def xla_stack(op: XlaOp, api: Frame | None) -> Stack:
    """``Python frames that traced the op | [XLA module: op] | CUDA API``."""
    label = Frame(f"{XLA_PREFIX}{op.module}: {op.op_name}]", FrameKind.NATIVE)
    return (*op.stack, label, *((api,) if api is not None else ()))
