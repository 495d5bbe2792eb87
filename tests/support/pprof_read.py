"""A small profile.proto reader, so tests (and users) can check pprof output without Go.

Reads what render_pprof writes (and any standard profile): sample types, period, comments,
and each sample's stack (root first, as (function, file, line)), values and labels.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field

from kubeprof.report.protowire import fields, to_int64, unpack

PprofFrame = tuple[str, str, int]  # (function name, file name, line)


@dataclass(frozen=True, slots=True)
class PprofSample:
    stack: tuple[PprofFrame, ...]  # root first
    values: tuple[int, ...]
    labels: dict[str, str | int]


@dataclass(slots=True)
class PprofProfile:
    sample_types: list[tuple[str, str]] = field(default_factory=list)  # (type, unit)
    period_type: tuple[str, str] = ("", "")
    period: int = 0
    duration_ns: int = 0
    default_sample_type: str = ""
    comments: list[str] = field(default_factory=list)
    samples: list[PprofSample] = field(default_factory=list)

    def total(self, sample_type: str) -> int:
        """Sum of one sample type over all samples."""
        idx = [t for t, _ in self.sample_types].index(sample_type)
        return sum(s.values[idx] for s in self.samples)


def _msg(data: bytes) -> dict[int, list]:
    out: dict[int, list] = {}
    for num, value in fields(data):
        out.setdefault(num, []).append(value)
    return out


def _one(msg: dict[int, list], num: int) -> int:
    return to_int64(msg[num][-1]) if num in msg else 0


def parse_pprof(data: bytes) -> PprofProfile:
    """Decode gzip'd (or raw) profile.proto bytes."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    top = _msg(data)
    strings = [s.decode() for s in top.get(6, [])]
    functions = {}
    for raw in top.get(5, []):
        fn = _msg(raw)
        functions[_one(fn, 1)] = (strings[_one(fn, 2)], strings[_one(fn, 4)])
    locations: dict[int, list[PprofFrame]] = {}
    for raw in top.get(4, []):
        loc = _msg(raw)
        frames = []
        for line_raw in loc.get(4, []):
            line = _msg(line_raw)
            name, file = functions[_one(line, 1)]
            frames.append((name, file, _one(line, 2)))
        locations[_one(loc, 1)] = frames  # inlined lines: callee first, as in pprof
    prof = PprofProfile()
    for raw in top.get(1, []):
        vt = _msg(raw)
        prof.sample_types.append((strings[_one(vt, 1)], strings[_one(vt, 2)]))
    if 11 in top:
        pt = _msg(top[11][-1])
        prof.period_type = (strings[_one(pt, 1)], strings[_one(pt, 2)])
    prof.period = _one(top, 12)
    prof.duration_ns = _one(top, 10)
    prof.default_sample_type = strings[_one(top, 14)]
    prof.comments = [strings[i] for v in top.get(13, []) for i in unpack(v)]
    for raw in top.get(2, []):
        smp = _msg(raw)
        loc_ids = [i for v in smp.get(1, []) for i in unpack(v)]
        values = tuple(to_int64(i) for v in smp.get(2, []) for i in unpack(v))
        labels: dict[str, str | int] = {}
        for lab_raw in smp.get(3, []):
            lab = _msg(lab_raw)
            key = strings[_one(lab, 1)]
            labels[key] = _one(lab, 3) if 3 in lab else strings[_one(lab, 2)]
        stack = [frame for lid in loc_ids for frame in locations[lid]]
        prof.samples.append(PprofSample(tuple(reversed(stack)), values, labels))
    return prof
