"""pprof output: a gzip-compressed profile.proto, for `go tool pprof`, Pyroscope and friends.

Encoded by hand (see protowire.py) so the report needs no protobuf dependency. Each
distinct frame becomes one Location with one Line pointing at a Function: Python frames
carry their file name and line number; native frames carry their ELF object as file name.
Kernel and GPU frames keep the ``_[k]`` / ``_[gpu]`` suffix of Frame.label() so they stay
told apart in pprof's flat views. All locations share one Mapping (named after the
main process) that declares functions, file names and line numbers present, so pprof
knows there is nothing left to symbolize.

Sample types: CPU view ``samples/count, cpu/nanoseconds`` with period ``1e9 / hz`` ns of
cpu; GPU view ``launches/count, gpu/nanoseconds``. Every sample carries the labels pid and
tid (numeric), thread and process (strings).
"""

from __future__ import annotations

import gzip

from kubeprof.model import Frame, FrameKind
from kubeprof.report.protowire import Message
from kubeprof.report.views import view_info, view_stacks
from kubeprof.reportdata import Profile


class _Strings:
    """pprof's string table: index 0 is always the empty string."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {"": 0}

    def __call__(self, text: str) -> int:
        idx = self.index.get(text)
        if idx is None:
            idx = self.index[text] = len(self.index)
        return idx


def function_name(frame: Frame) -> str:
    """Name shown by pprof: Python functions bare (file is separate), others as labelled."""
    return frame.name if frame.kind is FrameKind.PYTHON else frame.label()


def _value_type(strings: _Strings, kind: str, unit: str) -> Message:
    return Message().number(1, strings(kind)).number(2, strings(unit))


def render_pprof(profile: Profile, *, view: str = "cpu") -> bytes:
    """The view as gzip'd profile.proto bytes (deterministic: gzip mtime is 0)."""
    info = view_info(view)
    strings = _Strings()
    out = Message()
    out.message(1, _value_type(strings, info.count_unit, "count"))
    out.message(1, _value_type(strings, info.time_type, "nanoseconds"))

    functions: dict[tuple[str, str, str], int] = {}
    locations: dict[Frame, int] = {}
    func_msgs: list[Message] = []
    loc_msgs: list[Message] = []

    def location(frame: Frame) -> int:
        loc = locations.get(frame)
        if loc is not None:
            return loc
        fkey = (function_name(frame), frame.name, frame.file)
        fid = functions.get(fkey)
        if fid is None:
            fid = functions[fkey] = len(functions) + 1
            func_msgs.append(
                Message()
                .number(1, fid)
                .number(2, strings(fkey[0]))
                .number(3, strings(fkey[1]))
                .number(4, strings(fkey[2]))
            )
        loc = locations[frame] = len(locations) + 1
        line = Message().number(1, fid).number(2, frame.line)
        loc_msgs.append(Message().number(1, loc).number(2, 1).message(4, line))
        return loc

    stacks = view_stacks(profile, view)
    for ws in stacks:
        if not ws.samples and not ws.value_ns:
            continue
        sample = Message()
        sample.packed(1, [location(f) for f in reversed(ws.stack)])  # pprof wants leaf first
        sample.packed(2, [ws.samples, ws.value_ns])
        sample.message(3, Message().number(1, strings("pid")).number(3, ws.pid))
        sample.message(3, Message().number(1, strings("tid")).number(3, ws.tid))
        sample.message(3, Message().number(1, strings("thread")).number(2, strings(ws.thread)))
        sample.message(3, Message().number(1, strings("process")).number(2, strings(ws.process)))
        out.message(2, sample)

    main = max(stacks, key=lambda ws: ws.value_ns).process if stacks else profile.session
    mapping = Message().number(1, 1).number(5, strings(main))
    out.message(3, mapping.number(7, 1).number(8, 1).number(9, 1))
    for msg in loc_msgs:
        out.message(4, msg)
    for msg in func_msgs:
        out.message(5, msg)
    comments = [strings(f"session={profile.session}")]
    comments += [strings(f"{k}={v}") for k, v in sorted(profile.meta.items())]
    time_type = strings(info.time_type)
    period = 10**9 // profile.hz if view == "cpu" and profile.hz > 0 else 1
    # The string table goes last, once every string is interned (field order is free).
    out.number(10, int(profile.duration_s * 1e9))
    out.message(11, Message().number(1, time_type).number(2, strings("nanoseconds")))
    out.number(12, period)
    out.packed(13, comments)
    out.number(14, time_type)
    for text in strings.index:
        out.blob(6, text.encode())
    return gzip.compress(out.encode(), mtime=0)
