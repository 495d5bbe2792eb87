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
import subprocess
import sys
import types
from pathlib import Path

import pytest
from fake_cupti import FakeCupti

from kubeprof.agent.gpu import tracer as tracer_mod
from kubeprof.agent.gpu.stacks import StackTable
from kubeprof.agent.gpu.tracer import FOREIGN_MARKER, CuptiTracer, TracerConfig, TracerError

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
    return path, lib


class CFake(FakeCupti):
    """FakeCupti whose API callbacks go through the fake libcupti into the C hook."""

    lib: ctypes.CDLL

    def _call(self, domain, cbid, site, corr):  # type: ignore[override]
        name = f"api{int(cbid)}".encode()
        call = self.lib.fake_api_native if self.native_thread else self.lib.fake_api
        call(int(domain), int(cbid), int(site), corr, name)


@pytest.fixture
def cfake(monkeypatch, libcupti):
    path, lib = libcupti
    fk = CFake()
    fk.lib = lib
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


def test_every_kernel_joined_to_its_python_stack_through_the_c_hook(cfake, wire):
    rx, tx = wire
    tr = _started(tx, kinds=("kernel",), revalidate_every=8)
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
    # one walk per site plus the revalidations; every other launch was a table hit
    st = tr._hook_stats
    assert st["launches"] == 101 and st["sites"] == 2 and st["errors"] == 0
    assert st["hits"] + st["revalidations"] == 99 and st["revalidations"] == 99 // 8


def test_exits_and_nested_driver_launches_send_nothing(cfake, wire):
    _, tx = wire
    tr = _started(tx, kinds=("kernel",))
    corr = cfake.launch()
    assert [r[0] for r in tx.queues["launch"]] == [corr]
    tr._teardown()


def test_nested_copy_and_wait_get_the_runtime_calls_stack_under_their_own_id(cfake, wire):
    _, tx = wire
    tr = _started(tx, kinds=("kernel",))
    copy = cfake.memcpy()
    wait = cfake.synchronize()
    rows = list(tx.queues["launch"])
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


def _site(table: StackTable, revalidate: int = 4) -> int:
    return hook.site_for(sys._getframe(1), table.walk, 2, revalidate)


def test_call_site_table_rewalks_and_marks_a_site_seen_with_two_stacks():
    strings: list[str] = []
    stacks: list[list[list[int]]] = []

    def intern(s: str) -> int:
        strings.append(s)
        return len(strings)

    def define(frames: list[list[int]]) -> int:
        stacks.append(frames)
        return len(stacks)

    table = StackTable(intern, define)

    def leaf() -> int:
        return _site(table)

    def caller_a() -> int:
        return leaf()

    def caller_b() -> int:
        return leaf()

    def outer(which) -> int:  # key depth 2: leaf's and `which`'s frames; outer's differs
        return which()

    hook.reset()
    first = [outer(caller_a) for _ in range(9)]
    assert len(set(first)) == 1 and table.stats["walks"] == 1 + 2  # new site + 2 revalidations
    a_id = first[0]

    # same innermost two frames (leaf <- caller_a) reached from a different outer line
    def outer2() -> int:
        return caller_a()

    ids = [outer2() for _ in range(4)]
    assert ids[-1] != a_id  # the 4th hit re-walks, sees another stack, marks the site
    assert all(outer(caller_a) != 0 for _ in range(3))
