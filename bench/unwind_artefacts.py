"""Flame-graph artefacts of the BPF CPU sampler on a numpy + stdlib program, counted.

    sudo .venv/bin/python bench/unwind_artefacts.py --python PYTHON_WITH_NUMPY [--pyspy]

The program (below) runs four phases for fixed wall times: numpy matmul (OpenBLAS,
threaded), numpy ufuncs and sort (AVX-512 loops), json, re/zlib/hashlib. It is recorded
with `CpuCollector` at 99 Hz and every CPU sample's stack is judged:

- second tree: the user stack starts with a Python frame, i.e. its `<module>` sits beside
  the thread's real root (`_start -> ... -> <module>`) as a second tree;
- made-up frames: 100 or more `[unknown]` frames (the kernel's frame-pointer walk through
  code that uses rbp as data);
- marked: the stack carries `[native frames not unwound]`;
- per phase, how many of its samples sit in a second tree.

With `--pyspy` the same program is also recorded by `py-spy record --native -f raw` and
its stacks judged the same way (py-spy has no marker). Without numpy in PYTHON the numpy
phases are skipped. Prints one markdown table.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from kubeprof.agent.cpu.collector import CpuCollector
from kubeprof.model import CpuSample, FrameKind

WORKLOAD = r"""
import hashlib, json, re, sys, time, zlib
try:
    import numpy as np
except ImportError:
    np = None

def matmul_phase(s):
    a = np.random.rand(300, 300)
    end = time.time() + s
    while time.time() < end:
        a = (a @ a) / 300.0

def ufunc_phase(s):
    x = np.random.rand(200_000)
    end = time.time() + s
    while time.time() < end:
        y = np.sqrt(np.exp(x) + np.sin(x))
        x = np.sort(y) / y.max()

def json_phase(s):
    doc = {"k%d" % i: [i, str(i), {"a": i * 1.5}] for i in range(2000)}
    end = time.time() + s
    while time.time() < end:
        json.loads(json.dumps(doc))

def regex_phase(s):
    text = "abc123 def456 " * 5000
    end = time.time() + s
    while time.time() < end:
        re.findall(r"[a-z]+\d+", text)
        zlib.compress(text.encode())
        hashlib.sha256(text.encode()).hexdigest()

def run_all(scale):
    if np is not None:
        matmul_phase(3 * scale)
        ufunc_phase(3 * scale)
    json_phase(2 * scale)
    regex_phase(2 * scale)

run_all(float(sys.argv[1]))
"""
PHASES = ("matmul_phase", "ufunc_phase", "json_phase", "regex_phase")
MARK = "[native frames not unwound]"
Frames = list[tuple[str, bool]]  # root first: (name, is a Python frame)


@dataclass
class Judged:
    """Counts over the CPU samples of one recording."""

    samples: int = 0
    second: int = 0  # the user stack starts with a Python frame
    made_up: int = 0  # >= 100 [unknown] frames
    marked: int = 0  # carries [native frames not unwound]
    phases: dict[str, list[int]] = field(default_factory=dict)  # phase -> [second, all]


def judge(stacks: list[tuple[Frames, int]]) -> Judged:
    """Counts over weighted user stacks."""
    out = Judged()
    for frames, n in stacks:
        names = [name for name, _ in frames]
        rootless = bool(frames) and frames[0][1]
        out.samples += n
        out.second += n if rootless else 0
        out.made_up += n if sum(name == "[unknown]" for name in names) >= 100 else 0
        out.marked += n if MARK in names else 0
        phase = next((p for p in PHASES if p in names), None)
        if phase:
            counts = out.phases.setdefault(phase, [0, 0])
            counts[0] += n if rootless else 0
            counts[1] += n
    return out


def record_bpf(python: str, program: Path, scale: float) -> tuple[Judged, dict[str, int]]:
    c = CpuCollector(hz=99)
    proc = subprocess.Popen([python, str(program), str(scale)])
    samples: list[CpuSample] = []
    c.add_target(proc.pid)
    while proc.poll() is None:
        time.sleep(0.3)
        samples += c.poll().samples
    samples += c.stop().samples
    user = ([f for f in s.stack if f.kind is not FrameKind.KERNEL] for s in samples)
    stacks = [([(f.name, f.kind is FrameKind.PYTHON) for f in frames], 1) for frames in user]
    return judge(stacks), {k: v for k, v in c._counters.items() if v}


def record_pyspy(python: str, program: Path, scale: float) -> Judged:
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "raw.txt"
        cmd = [pyspy, "record", "-r", "99", "--native", "-f", "raw", "-o", str(out), "--"]
        subprocess.run([*cmd, python, str(program), str(scale)], check=True, capture_output=True)
        stacks = []
        for line in out.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            frames = []
            for label in stack.split(";"):
                name, _, where = label.partition(" (")
                frames.append((name, ".py:" in where or where.endswith(".py)")))
            stacks.append((frames, int(n)))
    return judge(stacks)


def row(label: str, r: Judged, counters: dict[str, int] | None) -> str:
    per = ", ".join(f"{p.removesuffix('_phase')} {a}/{b}" for p, (a, b) in sorted(r.phases.items()))
    extra = ", ".join(f"{k}={v}" for k, v in sorted((counters or {}).items()))
    share = 100 * r.second / max(r.samples, 1)
    return (
        f"| {label} | {r.samples} | {r.second} ({share:.1f} %) | {r.made_up} | {r.marked} "
        f"| {per} | {extra} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="interpreter to run (with numpy)")
    ap.add_argument("--scale", type=float, default=1.0, help="phase length factor (1: 10 s)")
    ap.add_argument("--pyspy", action="store_true", help="also record with py-spy --native")
    ap.add_argument("--label", default="kubeprof (this tree)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / "artefacts_workload.py"
        program.write_text(WORKLOAD)
        print(
            "| recorder | samples | second `<module>` tree | >= 100 `[unknown]` | marked "
            "| second tree per phase (of the phase's samples) | collector counters |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- |")
        r, counters = record_bpf(args.python, program, args.scale)
        print(row(args.label, r, counters), flush=True)
        if args.pyspy:
            print(row("py-spy --native", record_pyspy(args.python, program, args.scale), None))


if __name__ == "__main__":
    main()
