"""Pure pieces of the GPU path: intervals, idle ratio, top kernels, names, stacks, wire."""

from __future__ import annotations

import sys

import pytest

from kubeprof.agent.gpu.demangle import demangle_many
from kubeprof.agent.gpu.stacks import StackTable
from kubeprof.agent.gpu.wire import FrameDecoder, FrameError, encode_frame
from kubeprof.analysis import gpu_idle
from kubeprof.analysis.gpu_timeline import buckets, clip, gaps, merge, total
from kubeprof.analysis.kernel_names import short_name
from kubeprof.analysis.top_kernels import top_kernels
from kubeprof.model import GpuActivity


def k(start, end, device=0, pid=1, name="k", grid=(1, 1, 1), kind="kernel"):
    return GpuActivity(
        kind=kind,
        name=name,
        start_ns=start,
        end_ns=end,
        device=device,
        pid=pid,
        correlation_id=start,
        grid=grid,
    )


def test_merge_joins_overlaps_and_touching_intervals():
    assert merge([(5, 7), (0, 2), (1, 3), (3, 4), (9, 9)]) == [(0, 4), (5, 7)]
    assert total(merge([(0, 10), (2, 3)])) == 10


def test_gaps_and_clip():
    busy = [(2, 4), (6, 8)]
    assert gaps(busy, 0, 10) == [(0, 2), (4, 6), (8, 10)]
    assert clip(busy, 3, 7) == [(3, 4), (6, 7)]
    assert gaps([], 0, 5) == [(0, 5)]


def test_buckets_give_busy_fraction_per_slice():
    assert buckets([(0, 5)], 0, 10, 2) == (1.0, 0.0)
    assert buckets([(2, 7)], 0, 10, 2) == (0.6, 0.4)
    assert buckets([], 0, 10, 0) == ()


def test_idle_ratio_counts_concurrent_kernels_once_and_per_device():
    acts = [k(0, 10), k(5, 15), k(0, 20, device=1), k(30, 40, kind="memcpy")]
    # busy means any engine: the copy on device 0 counts
    per_dev = gpu_idle.by_device(acts, 0, 40)
    assert per_dev[0].busy_ns == 25 and per_dev[0].idle_ratio == pytest.approx(1 - 25 / 40)
    assert per_dev[1].busy_ns == 20
    s = gpu_idle.session(acts, 0, 40)
    assert s.devices == 2 and s.idle_ratio == pytest.approx(1 - 45 / 80)
    kernels_only = gpu_idle.by_device(acts, 0, 40, kinds=frozenset({"kernel"}))
    assert kernels_only[0].busy_ns == 15


def test_idle_ratio_per_process():
    acts = [k(0, 10, pid=1), k(0, 30, pid=2)]
    per = gpu_idle.by_process(acts, 0, 40)
    assert per[1].busy_ns == 10 and per[2].busy_ns == 30


def test_top_kernels_by_total_with_launch_config():
    acts = [
        k(0, 10, name="a", grid=(2, 1, 1)),
        k(10, 20, name="a", grid=(2, 1, 1)),
        k(20, 21, name="a", grid=(4, 1, 1)),
        k(30, 45, name="b"),
    ]
    top = top_kernels(acts, 5)
    assert [t.raw for t in top] == ["a", "b"]
    assert top[0].count == 3 and top[0].total_ns == 21 and top[0].grid == (2, 1, 1)
    assert top[0].launch_configs == 2
    assert top_kernels(acts, 1, by="mean")[0].raw == "b"
    with pytest.raises(ValueError):
        top_kernels(acts, by="bogus")


def test_short_names():
    assert (
        short_name("void at::native::vectorized_elementwise_kernel<4, Foo<float> >(int, Foo)")
        == "at::native::vectorized_elementwise_kernel"
    )
    assert short_name("nvjet_sm90_tst_128x64") == "nvjet_sm90_tst_128x64"


def test_demangle_batches_and_keeps_unmangled():
    out = demangle_many(["_Z6kernelPfi", "nvjet_x", "_Z6kernelPfi"])
    assert out["_Z6kernelPfi"] in ("kernel(float*, int)", "_Z6kernelPfi")  # no c++filt: raw
    assert "nvjet_x" not in out


def test_wire_round_trip_and_corruption():
    rows = [(1, 2, 3, 4, 9_000, 41), (5, 6, 7, 8, 9_001, 42)]
    frame = encode_frame({"t": "data", "pid": 3, "wire": 2}, {"launch": rows})
    dec = FrameDecoder()
    got = list(dec.feed(frame[:7])) + list(dec.feed(frame[7:]))
    assert got == [({"t": "data", "pid": 3, "wire": 2, "counts": {"launch": 2}}, {"launch": rows})]
    with pytest.raises(FrameError):
        list(FrameDecoder().feed(b"XXXX" + frame[4:]))


def test_a_version_1_tracers_launch_rows_decode_without_a_time():
    """Frames of a tracer before wire version 2 (no "wire" in the header): 4-field launch
    rows, read with time and thread 0; an unknown version is refused, not misread."""
    frame = encode_frame({"t": "data", "pid": 3}, {"launch": [(1, 2, 3, 4), (5, 6, 7, 8)]})
    ((_, records),) = FrameDecoder().feed(frame)
    assert records == {"launch": [(1, 2, 3, 4, 0, 0), (5, 6, 7, 8, 0, 0)]}
    future = encode_frame({"t": "data", "wire": 3}, {"launch": [(1, 2, 3, 4, 5, 6)]})
    with pytest.raises(FrameError, match="wire version 3 unknown"):
        list(FrameDecoder().feed(future))


class _Defs:
    def __init__(self):
        self.strings: list[str] = []
        self.stacks: list = []

    def intern(self, s: str) -> int:
        if s not in self.strings:
            self.strings.append(s)
        return self.strings.index(s)

    def define(self, frames) -> int:
        self.stacks.append(frames)
        return len(self.stacks)


def _site(table: StackTable) -> int:
    return table.capture(sys._getframe(0))  # one launch site, whatever calls it


def _caller_a(table: StackTable) -> int:
    return _site(table)


def _caller_b(table: StackTable) -> int:
    return _site(table)


def test_callsite_cache_reuses_stacks_and_detects_ambiguous_sites():
    d = _Defs()
    table = StackTable(d.intern, d.define, key_depth=1, revalidate_every=4)
    ids = {_caller_a(table) for _ in range(10)}
    assert len(ids) == 1 and table.stats["hits"] > 0
    # same innermost frame reached from another caller: found at the next revalidation
    seen_b = [_caller_b(table) for _ in range(10)]
    assert table.stats["ambiguous_sites"] == 1
    correct_b = seen_b[-1]
    assert correct_b not in ids
    assert sum(1 for s in seen_b if s != correct_b) <= 4  # at most until the check
    names = [d.strings[f[0]] for f in d.stacks[correct_b - 1]]
    assert names[:2] == ["_site", "_caller_b"]


def test_full_and_off_modes():
    d = _Defs()
    full = StackTable(d.intern, d.define, mode="full")
    assert _caller_a(full) == _caller_a(full)
    assert full.stats["hits"] == 0 and full.stats["walks"] == 2
    assert StackTable(d.intern, d.define, mode="off").capture(sys._getframe(0)) == 0
    with pytest.raises(ValueError):
        StackTable(d.intern, d.define, mode="bogus")
