"""On a GPU: each kernel's launch carries the time its API call was entered and the thread
that made it, in the clock its kernel's start was moved into (host CLOCK_MONOTONIC).

The program launches one matmul per step on an idle GPU (it synchronizes and sleeps between
steps), so each kernel starts shortly after its launch: the launch must come first, and the
gap must be what a launch on an idle GPU costs (microseconds, not the milliseconds a wrong
clock offset or a time taken at the wrong place would show)."""

from __future__ import annotations

import statistics

import pytest
from harness import python, run_traced

pytestmark = pytest.mark.gpu
STEPS = 40
IDLE_GPU_MAX_GAP_NS = 2_000_000  # an idle GPU starts a kernel well within 2 ms of its launch

PROGRAM = f"""
import threading, time, torch
x = torch.randn(2048, 2048, device="cuda")
torch.cuda.synchronize()
print("tid", threading.get_native_id(), flush=True)
for _ in range({STEPS}):
    y = x @ x
    torch.cuda.synchronize()
    time.sleep(0.002)
"""


@pytest.mark.parametrize("hook", ["c", "python"])
def test_launch_time_comes_before_its_kernel_on_the_calling_thread(hook: str) -> None:
    traced = run_traced([python(), "-c", PROGRAM], env={"KUBEPROF_GPU_HOOK": hook})
    assert traced.returncode == 0, traced.stderr[-2000:]
    tid = int(traced.stdout.split()[1])
    timed = [k for k in traced.kernels if k.launch_ns]
    assert len(timed) >= STEPS, traced.messages
    # the loop's matmuls: the last STEPS kernels of the matmul's name
    gemm = max({k.name for k in timed}, key=lambda n: sum(k.name == n for k in timed))
    steps = sorted((k for k in timed if k.name == gemm), key=lambda k: k.start_ns)[-STEPS:]
    gaps = [k.start_ns - k.launch_ns for k in steps]
    print(
        f"hook={hook} kernels={len(timed)} launch->start on an idle GPU: "
        f"min {min(gaps) / 1e3:.1f} us, median {statistics.median(gaps) / 1e3:.1f} us, "
        f"max {max(gaps) / 1e3:.1f} us"
    )
    assert all(traced.start_ns <= k.launch_ns <= k.start_ns for k in timed), min(
        k.start_ns - k.launch_ns for k in timed
    )
    assert max(gaps) < IDLE_GPU_MAX_GAP_NS, gaps
    assert {k.launch_tid for k in steps} == {tid}
    assert len(timed) == len(traced.kernels)  # every kernel's launch was stamped
