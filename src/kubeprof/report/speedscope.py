"""speedscope JSON (https://www.speedscope.app/file-format-schema.json), one file per view.

One "sampled" profile per thread (or per process with ``group="process"``), all sharing one
frame table. The profile has no time order left (stacks are aggregated), so each distinct
stack is one sample weighted by its value in nanoseconds, and samples are sorted by stack:
speedscope's "Time Order" view then shows merged, flame-graph-like blocks.
"""

from __future__ import annotations

import json
from collections import defaultdict

from kubeprof.model import Frame, FrameKind
from kubeprof.report.views import view_info, view_stacks
from kubeprof.reportdata import Profile, WeightedStack

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def frame_record(frame: Frame) -> dict[str, str | int]:
    """Speedscope frame: Python name with file/line; other kinds named by Frame.label()."""
    if frame.kind is FrameKind.PYTHON:
        rec: dict[str, str | int] = {"name": frame.name}
        if frame.file:
            rec["file"] = frame.file
        if frame.line:
            rec["line"] = frame.line
        return rec
    rec = {"name": frame.label()}
    if frame.file:
        rec["file"] = frame.file
    return rec


def speedscope_document(
    profile: Profile, *, view: str = "cpu", group: str = "thread"
) -> dict[str, object]:
    """The speedscope document as plain data (render_speedscope serializes it)."""
    info = view_info(view)
    if group not in ("thread", "process"):
        raise ValueError(f"unknown group {group!r}: expected 'thread' or 'process'")
    frame_index: dict[Frame, int] = {}
    frames: list[dict[str, str | int]] = []
    groups: dict[tuple[int, str, int, str], list[WeightedStack]] = defaultdict(list)
    for ws in view_stacks(profile, view):
        per_thread = group == "thread"
        groups[
            (ws.pid, ws.process, ws.tid if per_thread else 0, ws.thread if per_thread else "")
        ].append(ws)

    profiles = []
    totals: list[int] = []
    for key in sorted(groups):
        merged: dict[tuple[int, ...], int] = defaultdict(int)
        for ws in groups[key]:
            idx = []
            for frame in ws.stack:
                i = frame_index.get(frame)
                if i is None:
                    i = frame_index[frame] = len(frames)
                    frames.append(frame_record(frame))
                idx.append(i)
            merged[tuple(idx)] += ws.value_ns
        stacks = sorted(s for s in merged if merged[s] > 0)
        name = f"{key[1]} [{key[0]}]" + (f" / {key[3]} [{key[2]}]" if group == "thread" else "")
        total = sum(merged[s] for s in stacks)
        totals.append(total)
        profiles.append(
            {
                "type": "sampled",
                "name": f"{name} ({info.title})",
                "unit": "nanoseconds",
                "startValue": 0,
                "endValue": total,
                "samples": [list(s) for s in stacks],
                "weights": [merged[s] for s in stacks],
            }
        )
    return {
        "$schema": SCHEMA,
        "shared": {"frames": frames},
        "profiles": profiles,
        "name": f"{profile.session} ({info.title})",
        "activeProfileIndex": totals.index(max(totals)) if totals else 0,  # busiest first
        "exporter": "kubeprof",
    }


def render_speedscope(profile: Profile, *, view: str = "cpu", group: str = "thread") -> str:
    """Speedscope JSON text (compact, deterministic)."""
    doc = speedscope_document(profile, view=view, group=group)
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
