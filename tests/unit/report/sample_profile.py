"""A small profile with known shares, used by every renderer test.

CPU (hz=100, 10 ms per sample, 200 samples in all):
  python [10] MainThread [10]: main -> hot 80, main -> cold 20
  python [10] worker [11]:     worker_loop -> hot -> memcpy 60
  sha256sum [20] [20]:         _start -> sha256_block -> page_fault_[k] 40
So hot is 40 % self / 70 % total, memcpy 30 % self, cold 10 %, sha256sum 20 %.
GPU: main -> step -> cudaLaunchKernel -> sgemm (10 launches, 3 ms) / add_kernel (30, 1 ms).
"""

from __future__ import annotations

from kubeprof.model import Frame, FrameKind
from kubeprof.reportdata import Profile, WeightedStack

PERIOD = 10_000_000
MAIN = Frame("main", FrameKind.PYTHON, "/srv/app.py", 3)
HOT = Frame("hot", FrameKind.PYTHON, "/srv/app.py", 12)
COLD = Frame("cold", FrameKind.PYTHON, "/srv/app.py", 20)
WORKER = Frame("worker_loop", FrameKind.PYTHON, "/srv/app.py", 30)
MEMCPY = Frame("memcpy", FrameKind.NATIVE, "/lib/libc.so.6")
START = Frame("_start", FrameKind.NATIVE, "/usr/bin/sha256sum")
SHA = Frame("sha256_block", FrameKind.NATIVE, "/usr/bin/sha256sum")
FAULT = Frame("page_fault", FrameKind.KERNEL)
STEP = Frame("step", FrameKind.PYTHON, "/srv/app.py", 40)
LAUNCH = Frame("cudaLaunchKernel", FrameKind.CUDA_API, "libcudart.so.12")
SGEMM = Frame("sgemm", FrameKind.GPU)
ADD = Frame("add_kernel", FrameKind.GPU)


def ws(
    stack: tuple[Frame, ...],
    samples: int,
    *,
    pid=10,
    tid=10,
    thread="MainThread",
    process="python",
    value_ns: int | None = None,
) -> WeightedStack:
    value = samples * PERIOD if value_ns is None else value_ns
    return WeightedStack(stack, pid, tid, thread, process, samples, value)


def make_profile() -> Profile:
    cpu = (
        ws((MAIN, HOT), 80),
        ws((MAIN, COLD), 20),
        ws((WORKER, HOT, MEMCPY), 60, tid=11, thread="worker"),
        ws((START, SHA, FAULT), 40, pid=20, tid=20, thread="sha256sum", process="sha256sum"),
    )
    gpu = (
        ws((MAIN, STEP, LAUNCH, SGEMM), 10, value_ns=3_000_000),
        ws((MAIN, STEP, LAUNCH, ADD), 30, value_ns=1_000_000),
    )
    return Profile("unit-session", 100, 2.0, cpu, gpu, {"command": "python app.py"})
