"""Parsing py-spy's chrometrace output into per-thread Python timelines."""

from kubeprof.agent.cpu.python_stacks import parse_chrometrace
from kubeprof.model import FrameKind

PID = 4242


def _ev(ph, name, ts, tid=7, filename="/w/a.py", line=1, pid=PID):
    return {
        "args": {"filename": filename, "line": line},
        "cat": "py-spy",
        "name": name,
        "ph": ph,
        "pid": pid,
        "tid": tid,
        "ts": ts,
    }


def _trace():
    """What py-spy writes for: main>hot at 0, main>hot at 10 (no events), main>cold at
    20 ms, then the closing events at 35 ms; a second, named thread with OS tid 4243
    (py-spy 0.4 writes "thread (TID): NAME" once it knows the name)."""
    return [
        _ev("B", "thread (4242)", 0, filename="", line=0),
        _ev("B", "main", 0, line=3),
        _ev("B", "hot", 0, line=9),
        _ev("B", "thread (4243): worker-1", 5_000, tid=8, filename="", line=0),
        _ev("B", "worker", 5_000, tid=8, line=20),
        _ev("E", "hot", 20_000, line=9),
        _ev("B", "cold", 20_000, line=12),
        _ev("E", "cold", 35_000, line=12),
        _ev("E", "main", 35_000, line=3),
        _ev("E", "thread (4242)", 35_000, filename="", line=0),
        _ev("E", "worker", 35_000, tid=8, line=20),
        _ev("E", "thread (4243): worker-1", 35_000, tid=8, filename="", line=0),
        _ev("B", "other process", 1_000, pid=99),
    ]


def test_timelines_are_keyed_by_os_tid_and_replay_changes():
    origin = 1_000_000_000
    tls = parse_chrometrace(_trace(), PID, origin)
    assert set(tls) == {4242, 4243}
    main = tls[4242]
    assert main.times_ns == [origin, origin + 20_000_000, origin + 35_000_000]
    assert [[f.name for f in s] for s in main.stacks] == [["main", "hot"], ["main", "cold"], []]
    assert all(f.kind is FrameKind.PYTHON for s in main.stacks for f in s)
    assert main.stacks[0][1].line == 9 and main.stacks[0][1].file == "/w/a.py"
    assert [f.name for f in tls[4243].stacks[0]] == ["worker"]


def test_hex_thread_ids_and_unknown_threads():
    events = [
        _ev("B", "thread (0x1f)", 0, filename=""),
        _ev("B", "f", 0),
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": 7, "ts": 0, "args": {}},
        _ev("B", "g", 0, tid=9),  # no thread root: cannot be joined, dropped
    ]
    tls = parse_chrometrace(events, PID, 0)
    assert set(tls) == {0x1F}
    assert [f.name for f in tls[0x1F].stacks[-1]] == ["f"]


def test_native_frames_from_pyspy_native_are_native():
    events = [
        _ev("B", "thread (5)", 0, filename="", line=0),
        _ev("B", "main", 0, line=3),
        _ev("B", "0x7f00", 0, filename="/usr/lib/libcrypto.so.3", line=0),
    ]
    (tl,) = parse_chrometrace(events, PID, 0).values()
    assert [f.kind for f in tl.stacks[-1]] == [FrameKind.PYTHON, FrameKind.NATIVE]
    assert tl.stacks[-1][1].file == "/usr/lib/libcrypto.so.3"
