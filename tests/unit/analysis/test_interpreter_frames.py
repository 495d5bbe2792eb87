"""Folding CPython's own frames: self time moves to Python functions, C extensions stay."""

from kubeprof.analysis.interpreter_frames import fold_stack, is_interpreter_path
from kubeprof.model import Frame, FrameKind
from kubeprof.reportdata import Profile, WeightedStack
from kubeprof.reporting import fold_profile

LIBPY = "/usr/lib/libpython3.11.so.1.0"
START = Frame("_start", FrameKind.NATIVE, "/usr/bin/python3.11")
LIBC_MAIN = Frame("__libc_start_main", FrameKind.NATIVE, "/lib/libc.so.6")
EVAL = Frame("_PyEval_EvalFrameDefault", FrameKind.NATIVE, LIBPY)
CALL = Frame("PyObject_Vectorcall", FrameKind.NATIVE, LIBPY)
ADD = Frame("_PyLong_Add", FrameKind.NATIVE, LIBPY)
MAIN = Frame("main", FrameKind.PYTHON, "/app/x.py", 3)
HOT = Frame("hot", FrameKind.PYTHON, "/app/x.py", 9)
SHA = Frame("SHA256_Update", FrameKind.NATIVE, "/lib/libcrypto.so.3")
FFI = Frame("ffi_call", FrameKind.NATIVE, "/lib/libffi.so.8")
KERN = Frame("do_syscall_64", FrameKind.KERNEL)


def test_interpreter_paths():
    assert is_interpreter_path("/usr/bin/python3.11") and is_interpreter_path(LIBPY)
    assert is_interpreter_path("/root/.pyenv/versions/3.13.0/bin/python3.13")
    assert not is_interpreter_path("/opt/pythonista/bin/tool")
    assert not is_interpreter_path("/usr/lib/python3.11/lib-dynload/_ctypes.so")


def test_interpreter_frames_between_and_below_python_frames_are_folded():
    stack = (START, LIBC_MAIN, EVAL, MAIN, CALL, EVAL, HOT, EVAL, ADD, KERN)
    assert fold_stack(stack) == (LIBC_MAIN, MAIN, HOT, KERN)  # self time: the kernel leaf
    assert fold_stack((EVAL, MAIN, EVAL, HOT, EVAL, ADD)) == (MAIN, HOT)  # self: hot


def test_c_extension_frames_stay_under_their_python_caller():
    stack = (EVAL, MAIN, CALL, FFI, CALL, EVAL, HOT, EVAL, SHA)
    assert fold_stack(stack) == (MAIN, FFI, HOT, SHA)


def test_stacks_without_python_frames_keep_the_interpreter():
    stack = (START, EVAL, ADD)
    assert fold_stack(stack) == stack


def test_profile_folding_merges_stacks_that_become_equal_per_thread():
    a = WeightedStack((EVAL, MAIN, EVAL, HOT, ADD), 1, 1, "t", "p", 3, 30)
    b = WeightedStack((EVAL, MAIN, EVAL, HOT), 1, 1, "t", "p", 2, 20)
    other_thread = WeightedStack((EVAL, MAIN, EVAL, HOT), 1, 2, "u", "p", 1, 10)
    gpu = WeightedStack((EVAL, MAIN, Frame("k", FrameKind.GPU)), 1, 1, "t", "p", 1, 5)
    out = fold_profile(Profile("s", 99, 1.0, cpu=(a, b, other_thread), gpu=(gpu,)))
    assert [(ws.stack, ws.tid, ws.samples, ws.value_ns) for ws in out.cpu] == [
        ((MAIN, HOT), 1, 5, 50),
        ((MAIN, HOT), 2, 1, 10),
    ]
    assert out.gpu[0].stack == (MAIN, Frame("k", FrameKind.GPU))
