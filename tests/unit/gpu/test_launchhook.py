"""The C launch hook (``_launchhook``) against a fake libcupti: the same records as the
Python callback, from the same CUPTI callback sequence.

``fake_libcupti.c`` holds the one subscriber as libcupti does and fires callbacks on the
calling thread (or a new native thread), so the hook's real C path runs: runtime enter with
the Python stack, exits and nested driver calls skipped, nested copies and waits sent under
their own id with the runtime call's stack, frameless threads through the Python fallbacks,
and the call-site table's re-walks. Skipped where the hook or a C compiler is missing.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
import types
from array import array
from pathlib import Path
from types import SimpleNamespace

import pytest
from fake_cupti import FakeCupti

from kubeprof.agent.gpu import frame_keys
from kubeprof.agent.gpu import tracer as tracer_mod
from kubeprof.agent.gpu.launch_stacks import FOREIGN_MARKER
from kubeprof.agent.gpu.stacks import StackTable
from kubeprof.agent.gpu.tracer import CuptiTracer, TracerConfig, TracerError

hook = pytest.importorskip("kubeprof.agent.gpu._launchhook")
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def libcupti(tmp_path_factory) -> tuple[str, ctypes.CDLL]:
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.skip("no C compiler for the fake libcupti")
    path = str(tmp_path_factory.mktemp("cupti") / "libcupti.so.fake")
    subprocess.run(
        [cc, "-shared", "-fPIC", "-o", path, str(HERE / "fake_libcupti.c"), "-lpthread"],
        check=True,
    )
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    lib.fake_api.argtypes = [ctypes.c_int, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint32]
    lib.fake_api.argtypes += [ctypes.c_char_p]
    lib.fake_api_native.argtypes = lib.fake_api.argtypes
    lib.fake_record.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return path, lib


class CFake(FakeCupti):
    """FakeCupti whose API callbacks and activity records go through the fake libcupti
    into the C hook (records laid out as CUPTI's, at the offsets the hook reads)."""

    lib: ctypes.CDLL
    names: list

    def _call(self, domain, cbid, site, corr):  # type: ignore[override]
        name = f"api{int(cbid)}".encode()
        call = self.lib.fake_api_native if self.native_thread else self.lib.fake_api
        call(int(domain), int(cbid), int(site), corr, name)

    def flush(self) -> None:
        batch, self.pending = self.pending, []
        for a in batch:
            rec = self._pack(a)
            assert self.lib.fake_record(rec, len(rec)) == 0
        self.lib.fake_flush()

    def _pack(self, a: SimpleNamespace) -> bytes:
        if a.kind == 10:
            name = ctypes.create_string_buffer(a.name.encode())
            self.names.append(name)  # alive as long as CUPTI's own name strings
            return _record(
                248,
                [
                    (0, "i", 10),
                    (6, "H", a.registers_per_thread),
                    (16, "Q", a.start),
                    (24, "Q", a.end),
                    (40, "I", a.device_id),
                    (44, "I", a.context_id),
                    (48, "I", a.stream_id),
                    (52, "i", a.grid_x),
                    (56, "i", a.grid_y),
                    (60, "i", a.grid_z),
                    (64, "i", a.block_x),
                    (68, "i", a.block_y),
                    (72, "i", a.block_z),
                    (76, "i", a.static_shared_memory),
                    (80, "i", a.dynamic_shared_memory),
                    (92, "I", a.correlation_id),
                    (104, "Q", ctypes.addressof(name)),
                    (156, "I", a.graph_id),
                ],
            )
        if a.kind == 1:
            return _record(
                112,
                [
                    (0, "i", 1),
                    (4, "B", a.copy_kind),
                    (5, "B", a.src_kind),
                    (6, "B", a.dst_kind),
                    (8, "Q", a.bytes),
                    (16, "Q", a.start),
                    (24, "Q", a.end),
                    (32, "I", a.device_id),
                    (40, "I", a.stream_id),
                    (44, "I", a.correlation_id),
                ],
            )
        if a.kind == 38:
            return _record(
                56,
                [
                    (0, "i", 38),
                    (4, "i", a.type),
                    (8, "Q", a.start),
                    (16, "Q", a.end),
                    (24, "I", a.correlation_id),
                    (28, "I", a.context_id),
                    (32, "I", a.stream_id),
                ],
            )
        raise AssertionError(f"no layout for kind {a.kind} in this test")


@pytest.fixture
def cfake(monkeypatch, libcupti):
    path, lib = libcupti
    fk = CFake()
    fk.lib = lib
    fk.names = []
    pkg = types.ModuleType("cupti")
    pkg.cupti = fk.module()
    monkeypatch.setitem(sys.modules, "cupti", pkg)
    monkeypatch.setitem(sys.modules, "cupti.cupti", pkg.cupti)
    monkeypatch.setattr(tracer_mod, "preflight", lambda: None)
    monkeypatch.setattr(tracer_mod, "_version_check", lambda c: {"libcupti": path})
    monkeypatch.setattr(os, "register_at_fork", lambda **kw: None)
    yield fk
    hook.uninstall()  # a failed test must not leave the subscriber to the next


def _started(tx, **config) -> CuptiTracer:
    tr = CuptiTracer(tx, TracerConfig(hook="c", **config))
    tr.start()
    assert tr.sender.hello["hook"] == "c"
    return tr


def model_forward(fk: FakeCupti, n: int) -> None:
    for _ in range(n):
        fk.launch("_Z4gemmv")
    fk.launch("nvjet_sm90_tst", driver_only=True)


def _launch_rows(tx) -> list[tuple[int, ...]]:
    """Launch records waiting in the tracer: the C hook's packed rows, then the deque's."""
    blob, n = hook.take("launch", 1 << 20)
    flat = array("q", blob)
    return [tuple(flat[i : i + 6]) for i in range(0, 6 * n, 6)] + list(tx.queues["launch"])


@pytest.mark.parametrize("frames", ["auto", "api", "wrong offsets"])
def test_every_kernel_joined_to_its_python_stack_through_the_c_hook(
    cfake, wire, frames, monkeypatch
):
    rx, tx = wire
    if frames == "wrong offsets":  # a layout that does not fit: the check at start refuses it
        good = frame_keys.offsets(sys.version_info[:2])
        monkeypatch.setattr(frame_keys, "offsets", lambda v: (*good[:2], good[3], *good[3:]))
        frames = "auto"
        expected = "api"
    else:
        # from 3.11 the default reads the interpreter frames in place; "api": frame objects
        expected = "raw" if frames == "auto" else "api"
    tr = _started(tx, kinds=("kernel",), frames=frames)
    assert tr.sender.hello["frames"] == expected
    assert hook.stats()["frames"] == tr.sender.hello["frames"]
    tx.start()
    model_forward(cfake, 100)
    tr.stop()
    acts = rx.stop(2.0).gpu_activities
    assert len(acts) == 101
    for a in acts:
        names = [f.name for f in a.stack]
        assert "model_forward" in names, names
        assert "CFake._call" in names  # the frame that called into the library, as at a real launch
    assert {a.stack[-1].name for a in acts} == {"api211", "api307"}
    # one walk per call site (the loop's launch, the driver-only one); the rest were hits
    st = tr._hook_stats
    assert st["launches"] == 101 and st["sites"] == 2 and st["errors"] == 0
    assert st["hits"] == 99 and tr.stacks.stats["walks"] == 2


def test_a_launch_carries_its_call_time_and_calling_thread(cfake, wire):
    """Each launch row, a nested copy's driver alias too, holds host CLOCK_MONOTONIC at the
    call (between two clock reads around it) and the calling thread's kernel id, the clock
    and id CPU samples carry; the receiver puts both on the kernel's record."""
    rx, tx = wire
    tr = _started(tx, kinds=("kernel",))
    me = threading.get_native_id()
    before = time.monotonic_ns()
    corr = cfake.launch()
    between = time.monotonic_ns()
    copy = cfake.memcpy()
    after = time.monotonic_ns()
    rows = {r[0]: r for r in _launch_rows(tx)}
    assert before <= rows[corr][4] <= between and rows[corr][5] == me
    assert between <= rows[copy][4] <= rows[copy + 1][4] <= after
    assert rows[copy][5] == rows[copy + 1][5] == me
    tx.start()
    before = time.monotonic_ns()
    model_forward(cfake, 3)
    after = time.monotonic_ns()
    tr.stop()
    # (the first launch's row was taken above: its kernel arrives without one)
    acts = [a for a in rx.stop(2.0).gpu_activities if a.correlation_id > copy]
    assert len(acts) == 4
    assert all(before <= a.launch_ns <= after and a.launch_tid == me for a in acts)
    assert [a.launch_ns for a in acts] == sorted(a.launch_ns for a in acts)


def test_exits_and_nested_driver_launches_send_nothing(cfake, wire):
    _, tx = wire
    tr = _started(tx, kinds=("kernel",))
    corr = cfake.launch()
    assert [r[0] for r in _launch_rows(tx)] == [corr]
    tr._teardown()


def test_nested_copy_and_wait_get_the_runtime_calls_stack_under_their_own_id(cfake, wire):
    _, tx = wire
    tr = _started(tx, kinds=("kernel",))
    copy = cfake.memcpy()
    wait = cfake.synchronize()
    rows = _launch_rows(tx)
    tr._teardown()
    ids = [r[0] for r in rows]
    assert ids == [copy, copy + 1, wait, wait + 1]  # the driver alias right after its call
    assert rows[0][1] == rows[1][1] and rows[0][1] > 0  # same stack, the runtime call's
    assert rows[2][1] == rows[3][1] and rows[2][2] == rows[3][2]


def test_a_native_thread_launch_takes_the_main_threads_stack(cfake, wire):
    rx, tx = wire
    tr = _started(tx, kinds=("kernel",))
    tx.start()
    cfake.native_thread = True
    cfake.launch()
    cfake.native_thread = False
    tr.stop()
    (a,) = rx.stop(2.0).gpu_activities
    names = [f.name for f in a.stack]
    assert (
        FOREIGN_MARKER in names
        and "test_a_native_thread_launch_takes_the_main_threads_stack" in names
    )
    assert tr._hook_stats["slow"] >= 1


def test_a_native_threads_launch_has_its_own_time_and_thread(cfake, wire):
    """The Python fallback (a thread with no frames) keeps the hook's stamp and the calling
    thread's id, not the main thread's whose stack it borrows."""
    rx, tx = wire
    tr = _started(tx, kinds=("kernel",))
    tx.start()
    cfake.native_thread = True
    before = time.monotonic_ns()
    cfake.launch()
    after = time.monotonic_ns()
    cfake.native_thread = False
    tr.stop()
    (a,) = rx.stop(2.0).gpu_activities
    assert before <= a.launch_ns <= after
    assert a.launch_tid > 0 and a.launch_tid != threading.get_native_id()


def test_pause_resume_and_unknown_ids_through_the_c_hook(cfake, wire):
    rx, tx = wire
    tr = _started(tx, kinds=("kernel",))
    tx.start()
    assert tx.hello.get("skipped_cbids") == 1  # cudaGraphLaunch, refused by this "library"
    tr.pause()
    cfake.launch()
    tr.resume()
    cfake.launch()
    tr.stop()
    assert len(rx.stop(2.0).gpu_activities) == 1


def test_another_profilers_subscriber_is_one_clear_error(cfake, wire, libcupti):
    _, tx = wire
    tr = _started(tx, kinds=("kernel",))
    with pytest.raises(TracerError, match="already installed"):  # ours, twice
        CuptiTracer(tx, TracerConfig(hook="c")).start()
    tr._teardown()
    other = ctypes.c_void_p()
    lib = libcupti[1]
    assert lib.cuptiSubscribe(ctypes.byref(other), None, None) == 0  # e.g. torch.profiler
    with pytest.raises(TracerError, match="already in use by another profiler"):
        CuptiTracer(tx, TracerConfig(hook="c")).start()
    lib.cuptiUnsubscribe(other)
    # the subscriber is free again: a new tracer (the dormant tracer's next "on") starts
    _started(tx, kinds=("kernel",))._teardown()


def test_hook_c_without_the_module_names_the_fix(monkeypatch):
    import kubeprof.agent.gpu as gpu_pkg

    monkeypatch.setitem(sys.modules, "kubeprof.agent.gpu._launchhook", None)
    monkeypatch.delattr(gpu_pkg, "_launchhook")
    with pytest.raises(TracerError, match=r"build_launchhook\.sh"):
        tracer_mod.load_hook("c")
    assert tracer_mod.load_hook("auto") is None
    with pytest.raises(TracerError, match="KUBEPROF_GPU_HOOK"):
        TracerConfig.from_env({"KUBEPROF_GPU_HOOK": "fast"})


def test_a_hook_built_from_an_older_source_is_not_used(monkeypatch):
    """A build left from before launch times packs 4-field launch rows the receiver would
    misread: refused by name (KUBEPROF_GPU_HOOK=c) or left for the Python callback."""
    import kubeprof.agent.gpu as gpu_pkg

    assert tracer_mod.load_hook("c") is hook and hook.WIRE_VERSION == 2
    stale = types.ModuleType("_launchhook")  # a build without WIRE_VERSION: version 1
    monkeypatch.setattr(gpu_pkg, "_launchhook", stale, raising=False)
    with pytest.raises(TracerError, match=r"older source \(wire version 1, not 2\)"):
        tracer_mod.load_hook("c")
    assert tracer_mod.load_hook("auto") is None


def _recording_table() -> tuple[StackTable, list[str], list[list[list[int]]]]:
    """A StackTable whose strings and stacks are kept in the two lists returned with it."""
    strings: list[str] = []
    stacks: list[list[list[int]]] = []

    def intern(text: str) -> int:
        strings.append(text)
        return len(strings)

    def define(frames: list[list[int]]) -> int:
        stacks.append(frames)
        return len(stacks)

    return StackTable(intern, define), strings, stacks


def test_call_site_keys_are_whole_stacks_so_two_callers_never_share_an_id():
    table, strings, stacks = _recording_table()
    hook.reset()

    def leaf() -> int:
        return hook.site_for(sys._getframe(1), table.walk)

    def layer() -> int:  # the same innermost frames, reached from two different lines
        return leaf()

    def from_prefill() -> int:
        return layer()

    def from_decode() -> int:
        return layer()

    a = [from_prefill() for _ in range(5)]
    b = [from_decode() for _ in range(5)]
    assert len(set(a)) == 1 and len(set(b)) == 1 and a[0] != b[0]
    assert table.stats["walks"] == 2  # one per distinct stack, every other call a hit
    names = [strings[f[0] - 1] for f in stacks[b[0] - 1]]
    assert (
        "test_call_site_keys_are_whole_stacks_so_two_callers_never_share_an_id.<locals>.from_decode"
        in names
    )


def test_keys_read_from_the_interpreter_frames_in_place_are_whole_stacks_too():
    """The in-place keys (``frame_keys``) as exact as the frame objects': the same stack
    always one id and, once warm, no walk, though its inner frames are new at every call (as
    a module call's are at each launch); a different outer line a new id; a generator's
    frames too."""
    table, strings, stacks = _recording_table()
    assert frame_keys.use(hook, "auto") == "raw"
    try:

        def leaf() -> int:
            return hook.site_here(table.walk)

        def layer() -> int:
            return leaf()

        def from_prefill() -> int:
            return layer()

        def from_decode() -> int:
            return layer()

        def in_generator():
            while True:
                yield layer()

        def two_lines() -> tuple[int, int]:
            first = layer()
            second = layer()  # the same frames but this one's line: another stack
            return first, second

        gen = in_generator()

        def calls(n: int) -> tuple[set[int], set[int], set[int]]:
            a = {from_prefill() for _ in range(n)}
            b = {from_decode() for _ in range(n)}
            return a, b, {next(gen) for _ in range(n)}

        # warm-up: a call site's instruction pointer moves once CPython specialises the call
        # (the frame API's key moves with it), so a site may be walked twice at first
        walks = []
        rounds = []
        for _ in range(2):  # the same line: the same stacks
            rounds.append(calls(20))
            walks.append(table.stats["walks"])
        a, b, c = rounds[1]
        assert rounds[0] == rounds[1] and len(a) == len(b) == len(c) == 1
        assert len(a | b | c) == 3
        assert walks[1] == walks[0] and hook.stats()["frames"] == "raw"
        b, c = [b.pop()], [c.pop()]
        pairs = {two_lines() for _ in range(20)}
        assert len(pairs) == 1 and len(set(pairs.pop())) == 2
        for sid, outer in ((b[0], "from_decode"), (c[0], "in_generator")):
            names = [strings[f[0] - 1].rsplit(".", 1)[-1] for f in stacks[sid - 1]]
            assert names[:3] == ["leaf", "layer", outer], names
    finally:
        frame_keys.use(hook, "api")
    assert hook.stats()["frames"] == "api"


def test_keys_in_place_follow_the_stack_through_c_calls_and_on_each_thread():
    """A launch from Python that C called back (a module's hook, ``map``), on the main thread
    and on another Python thread: each thread's own chain, read across the C call (3.12 puts
    an entry frame there, which the key skips), as the frame objects show it."""
    table, strings, stacks = _recording_table()
    assert frame_keys.use(hook, "auto") == "raw"
    try:

        def leaf(_: int = 0) -> int:
            return hook.site_here(table.walk)

        def via_c() -> set[int]:
            return set(map(leaf, range(20)))  # builtin map calls back into Python

        def rounds() -> tuple[list[set[int]], list[int]]:
            ids, walks = [], []
            for _ in range(3):  # the same line: the same stack
                ids.append(via_c())
                walks.append(table.stats["walks"])
            return ids, walks

        got: dict[str, tuple[list[set[int]], list[int]]] = {}

        def on_thread() -> None:
            got["thread"] = rounds()

        worker = threading.Thread(target=on_thread)
        worker.start()
        worker.join()
        got["main"] = rounds()
        for ids, walks in got.values():
            assert len(ids[2]) == 1 and ids[1] == ids[2] and walks[1] == walks[2], (ids, walks)
        thread_sid, main_sid = got["thread"][0][2].pop(), got["main"][0][2].pop()
        assert thread_sid != main_sid
        for sid, outer in ((thread_sid, "on_thread"), (main_sid, "rounds")):
            names = [strings[f[0] - 1].rsplit(".", 1)[-1] for f in stacks[sid - 1]]
            assert names[:3] == ["leaf", "via_c", "rounds"], names
            assert outer in names, names
        test = "test_keys_in_place_follow_the_stack_through_c_calls_and_on_each_thread"
        for sid, here in ((thread_sid, False), (main_sid, True)):
            assert (test in [strings[f[0] - 1] for f in stacks[sid - 1]]) is here
    finally:
        frame_keys.use(hook, "api")


def test_frame_offsets_that_disagree_with_the_frame_objects_are_not_used():
    good = frame_keys.offsets(sys.version_info[:2])
    assert good is not None
    # the previous-frame pointer where the code object should be: a readable field, wrong
    wrong = (*good[:2], good[3], *good[3:])
    assert hook.raw_frames(wrong) is False
    assert hook.stats()["frames"] == "api"
    assert frame_keys.use(hook, "api") == "api"
    with pytest.raises(ValueError, match="KUBEPROF_GPU_FRAMES"):
        frame_keys.use(hook, "fast")
    assert frame_keys.offsets((3, 10)) is None  # 3.10's frames are objects already


def _record(size: int, fields: list[tuple[int, str, int]]) -> bytes:
    buf = bytearray(size)
    for off, fmt, value in fields:
        struct.pack_into("<" + fmt, buf, off, value)
    return bytes(buf)


def test_activity_records_pack_as_the_python_converter_reads_them(fake, wire):
    """The C converter's field offsets (cupti_activity.h) give the rows the Python converter
    makes from cupti-python's objects with the same values."""
    _, tx = wire
    name = ctypes.create_string_buffer(b"_Z6kernelPf")
    ptr = ctypes.addressof(name)
    kernel = dict(
        kind=10,
        start=1000,
        end=2000,
        completed=2100,
        device_id=3,
        context_id=7,
        stream_id=13,
        grid_x=4,
        grid_y=5,
        grid_z=6,
        block_x=128,
        block_y=2,
        block_z=1,
        registers_per_thread=40,
        static_shared_memory=1024,
        dynamic_shared_memory=4096,
        correlation_id=99,
        graph_id=11,
    )
    kbytes = _record(
        248,
        [
            (0, "i", 10),
            (6, "H", 40),
            (16, "Q", 1000),
            (24, "Q", 2000),
            (32, "Q", 2100),
            (40, "I", 3),
            (44, "I", 7),
            (48, "I", 13),
            (52, "i", 4),
            (56, "i", 5),
            (60, "i", 6),
            (64, "i", 128),
            (68, "i", 2),
            (72, "i", 1),
            (76, "i", 1024),
            (80, "i", 4096),
            (92, "I", 99),
            (104, "Q", ptr),
            (156, "I", 11),
        ],
    )
    copy = dict(
        kind=1,
        copy_kind=1,
        src_kind=1,
        dst_kind=3,
        bytes=1 << 20,
        start=5,
        end=9,
        device_id=0,
        context_id=1,
        stream_id=7,
        correlation_id=41,
    )
    cbytes = _record(
        112,
        [
            (0, "i", 1),
            (4, "B", 1),
            (5, "B", 1),
            (6, "B", 3),
            (8, "Q", 1 << 20),
            (16, "Q", 5),
            (24, "Q", 9),
            (32, "I", 0),
            (36, "I", 1),
            (40, "I", 7),
            (44, "I", 41),
        ],
    )
    mset = dict(
        kind=2, bytes=256, start=3, end=4, device_id=0, context_id=1, stream_id=7, correlation_id=43
    )
    mbytes = _record(
        104,
        [
            (0, "i", 2),
            (8, "Q", 256),
            (16, "Q", 3),
            (24, "Q", 4),
            (32, "I", 0),
            (36, "I", 1),
            (40, "I", 7),
            (44, "I", 43),
        ],
    )
    sync = dict(
        kind=38, type=3, start=10, end=20, correlation_id=45, context_id=1, stream_id=0xFFFFFFFF
    )
    sbytes = _record(
        56,
        [
            (0, "i", 38),
            (4, "i", 3),
            (8, "Q", 10),
            (16, "Q", 20),
            (24, "I", 45),
            (28, "I", 1),
            (32, "I", 0xFFFFFFFF),
        ],
    )
    ids: dict[str, int] = {}

    def intern(text: str) -> int:
        return ids.setdefault(text, len(ids) + 1)

    hook.reset()
    for kind in ("kernel", "memcpy", "memset", "sync"):  # whatever earlier tests left
        hook.take(kind, 1 << 20)
    for rec in (kbytes, kbytes, cbytes, mbytes, sbytes):
        hook.convert_record(rec, intern)
    got = {}
    for kind, width in (("kernel", 17), ("memcpy", 9), ("memset", 6), ("sync", 6)):
        blob, n = hook.take(kind, 100)
        flat = array("q", blob)
        got[kind] = [tuple(flat[i : i + width]) for i in range(0, n * width, width)]
    # the Python converter on cupti-python-like objects with the same values
    tr = CuptiTracer(tx, TracerConfig(kinds=("kernel",)))
    tr._cupti = fake.module()
    tx.intern = intern  # type: ignore[method-assign]
    objs = [
        SimpleNamespace(**kernel, name="_Z6kernelPf"),
        SimpleNamespace(**kernel, name="_Z6kernelPf"),
        SimpleNamespace(**copy),
        SimpleNamespace(**mset),
        SimpleNamespace(**sync),
    ]
    tr._convert(objs)
    for kind in got:
        assert got[kind] == list(tx.queues[kind]), kind
    assert len(got["kernel"]) == 2 and got["kernel"][0][-1] == ids["_Z6kernelPf"]
