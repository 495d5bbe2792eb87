"""Deterministic synthetic profiles of any size, for renderer tests, benchmarks and demos.

Stack ``i`` is spelled by the base-10 digits of ``i`` (one Python frame per digit), so
``n`` stacks are always ``n`` distinct stacks sharing prefixes the way real call trees do,
followed by a few native and kernel frames that vary with ``i``.
"""

from __future__ import annotations

from kubeprof.model import Frame, FrameKind
from kubeprof.reportdata import Profile, WeightedStack

_ROOT = (
    Frame("<module>", FrameKind.PYTHON, "/app/train.py", 1),
    Frame("main", FrameKind.PYTHON, "/app/train.py", 40),
)
_NATIVE = (
    Frame("_PyEval_EvalFrameDefault", FrameKind.NATIVE, "/usr/bin/python3.11"),
    Frame("at::native::add_kernel", FrameKind.NATIVE, "/opt/torch/lib/libtorch_cpu.so"),
    Frame("memcpy", FrameKind.NATIVE, "/lib/x86_64-linux-gnu/libc.so.6"),
    Frame("std::vector<int, std::allocator<int>>::push_back", FrameKind.NATIVE, "/app/ext.so"),
)
_KERNEL = (
    Frame("entry_SYSCALL_64", FrameKind.KERNEL),
    Frame("do_syscall_64", FrameKind.KERNEL),
    Frame("futex_wait", FrameKind.KERNEL),
)
_KERNELS = ("ampere_sgemm_128x64_nn", "vectorized_elementwise_kernel<4, add>", "reduce_kernel")


def _python_frames(i: int, min_digits: int) -> tuple[Frame, ...]:
    digits = str(i).zfill(min_digits)
    return tuple(
        Frame(f"layer{level}_fn{d}", FrameKind.PYTHON, f"/app/model/layer{level}.py", 10 + int(d))
        for level, d in enumerate(digits)
    )


def synthetic_profile(n_stacks: int, *, gpu_stacks: int = 0, hz: int = 99) -> Profile:
    """A profile with `n_stacks` distinct CPU stacks (and `gpu_stacks` distinct GPU stacks)."""
    period = 10**9 // hz
    width = len(str(max(n_stacks, gpu_stacks, 1) - 1))
    cpu = []
    for i in range(n_stacks):
        tail = _NATIVE[: i % 5] + (_KERNEL if i % 7 == 0 else ())
        samples = 1 + (i * 2654435761) % 37
        pid = 1000 + i % 2
        cpu.append(
            WeightedStack(
                stack=_ROOT + _python_frames(i, width) + tail,
                pid=pid,
                tid=pid + i % 3,
                thread="MainThread" if i % 3 == 0 else f"worker-{i % 3}",
                process=f"python{i % 2}",
                samples=samples,
                value_ns=samples * period,
            )
        )
    gpu = []
    for i in range(gpu_stacks):
        launches = 1 + i % 11
        gpu.append(
            WeightedStack(
                stack=_ROOT
                + _python_frames(i, width)
                + (
                    Frame("cudaLaunchKernel", FrameKind.CUDA_API, "libcudart.so"),
                    Frame(_KERNELS[i % 3], FrameKind.GPU),
                ),
                pid=1000,
                tid=1000,
                thread="MainThread",
                process="python0",
                samples=launches,
                value_ns=launches * (1000 + (i * 7919) % 50000),
            )
        )
    return Profile(f"synthetic-{n_stacks}", hz, 60.0, tuple(cpu), tuple(gpu), {"host": "bench"})
