"""GPU idle from NVML per-process utilisation: the one definition the light agent's
``kubeprof_gpu_idle_ratio`` and a report's NVML fallback (``pod_idle``) share.

Per poll, a set of processes' busy figure on a GPU is the sum of their ``smUtil`` samples
since the previous poll (the highest per process), capped at 100 %; a process in NVML's
running list without a sample ran no kernel in that period and counts 0, not missing. Over
a window the idle ratio is ``1 - mean(busy) / 100`` over the polls in which the processes
held the GPU. No I/O and no imports beyond the standard library: the light agent runs it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence


def poll_busy(
    running: Collection[int], samples: Iterable[tuple[int, float]], pids: Collection[int]
) -> float | None:
    """Busy percent of ``pids`` in one poll from NVML's running list and its (pid, smUtil)
    samples; None when none of them was running on the GPU in that poll."""
    held = {p for p in pids if p in running}
    if not held:
        return None
    sm: dict[int, float] = {}
    for pid, util in samples:
        if pid in held:
            sm[pid] = max(sm.get(pid, 0.0), util)
    return min(100.0, sum(sm.values()))


def idle_ratio(busy: Sequence[float]) -> float | None:
    """``1 - mean(busy %) / 100`` clamped to 0..1; None without a poll."""
    if not busy:
        return None
    return min(1.0, max(0.0, 1.0 - sum(busy) / len(busy) / 100.0))
