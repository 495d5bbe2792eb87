"""Top kernels by total GPU time, with count, mean duration and launch configuration."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from kubeprof.analysis.gpu_columns import BLOCK, GRID, NAME, durations, of_kinds
from kubeprof.analysis.kernel_names import short_name
from kubeprof.model import GpuActivity


@dataclass(frozen=True, slots=True)
class KernelStat:
    """All launches of one kernel (by raw name)."""

    name: str  # short readable label
    demangled: str
    raw: str
    count: int
    total_ns: int
    mean_ns: float
    min_ns: int
    max_ns: int
    share: float  # of all kernel time
    grid: tuple[int, int, int]  # most frequent launch configuration
    block: tuple[int, int, int]
    registers: int
    shared_mem: int
    launch_configs: int  # distinct (grid, block) pairs seen


def top_kernels(
    activities: Iterable[GpuActivity], n: int = 20, by: str = "total"
) -> list[KernelStat]:
    """The ``n`` kernels with the largest ``by`` (total, count or mean)."""
    groups: dict[str, list[GpuActivity]] = defaultdict(list)
    kernels = of_kinds(activities, ("kernel",))
    for name, a in zip(map(NAME, kernels), kernels, strict=True):
        groups[name].append(a)
    per_name = {raw: durations(acts) for raw, acts in groups.items()}
    all_ns = sum(sum(durs) for durs in per_name.values())
    stats = []
    for raw, acts in groups.items():
        durs = per_name[raw]
        tot = sum(durs)
        configs = _configs(acts)
        (grid, block), _ = configs.most_common(1)[0]
        demangled = acts[0].demangled or raw
        stats.append(
            KernelStat(
                name=short_name(demangled),
                demangled=demangled,
                raw=raw,
                count=len(acts),
                total_ns=tot,
                mean_ns=tot / len(acts),
                min_ns=min(durs),
                max_ns=max(durs),
                share=tot / all_ns if all_ns else 0.0,
                grid=grid,
                block=block,
                registers=acts[0].registers,
                shared_mem=acts[0].shared_mem,
                launch_configs=len(configs),
            )
        )
    key = {"total": lambda s: s.total_ns, "count": lambda s: s.count, "mean": lambda s: s.mean_ns}
    if by not in key:
        raise ValueError(f"by must be one of {sorted(key)}")
    stats.sort(key=lambda s: (-key[by](s), s.raw))
    return stats[:n]


def _configs(acts: list[GpuActivity]) -> Counter[tuple[tuple[int, int, int], tuple[int, int, int]]]:
    """Launches per (grid, block), in first-seen order. Counted by the tuples' identity
    first (records share one tuple per shape), so each launch costs no tuple hashing."""
    grids, blocks = list(map(GRID, acts)), list(map(BLOCK, acts))
    refs = list(zip(map(id, grids), map(id, blocks), strict=True))
    by_ref: Counter[tuple[int, int]] = Counter(refs)
    shape = dict(zip(refs, zip(grids, blocks, strict=True), strict=True))
    out: Counter[tuple[tuple[int, int, int], tuple[int, int, int]]] = Counter()
    for ref, n in by_ref.items():
        out[shape[ref]] += n
    return out
