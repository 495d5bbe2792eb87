"""The pure joins: Python stack at a time, and splicing native/kernel frames under it."""

from kubeprof.agent.cpu.merge import (
    NOT_UNWOUND,
    interleave,
    is_interpreter,
    merge_stack,
    python_stack_at,
)
from kubeprof.model import Frame, FrameKind


def _py(name: str, line: int) -> Frame:
    return Frame(name, FrameKind.PYTHON, "/a.py", line)


PY_HOT = (_py("main", 3), _py("hot", 9))
PY_COLD = (_py("main", 4), _py("cold", 12))
EVAL = Frame("_PyEval_EvalFrameDefault", FrameKind.NATIVE, "/usr/bin/python3.11")
LIBPY = Frame("PyObject_Call", FrameKind.NATIVE, "/usr/lib/libpython3.11.so.1.0")
SHA = Frame("sha256_block_data_order", FrameKind.NATIVE, "/usr/lib/libcrypto.so.3")
START = Frame("__libc_start_main", FrameKind.NATIVE, "/usr/lib/libc.so.6")
KERNEL = (Frame("asm_exc_page_fault", FrameKind.KERNEL), Frame("handle_mm_fault", FrameKind.KERNEL))

PERIOD = 10_000_000


def test_stack_at_uses_nearest_sample_boundary():
    times = [1_000_000_000, 1_050_000_000]
    stacks = [PY_HOT, PY_COLD]
    assert python_stack_at(times, stacks, 1_020_000_000, PERIOD) == PY_HOT
    # Within half a period before the change, the next sample is the nearer one.
    assert python_stack_at(times, stacks, 1_046_000_000, PERIOD) == PY_COLD
    assert python_stack_at(times, stacks, 1_044_000_000, PERIOD) == PY_HOT
    assert python_stack_at(times, stacks, 9_000_000_000, PERIOD) == PY_COLD
    assert python_stack_at(times, stacks, 900_000_000, PERIOD) is None
    assert python_stack_at([], [], 5, PERIOD) is None


def test_merge_without_python_keeps_native_and_kernel():
    assert merge_stack(None, [START, SHA], KERNEL) == (START, SHA, *KERNEL)
    assert merge_stack((), [START], ()) == (START,)


def test_merge_drops_native_frames_rootward_of_the_innermost_interpreter_frame():
    native = [START, EVAL, LIBPY, EVAL, SHA]
    merged = merge_stack(PY_HOT, native, KERNEL)
    assert merged == (*PY_HOT, EVAL, SHA, *KERNEL)
    assert merged[-1].kind is FrameKind.KERNEL  # kernel at the leaf end


def test_merge_keeps_all_native_frames_when_no_interpreter_frame_was_walked():
    assert merge_stack(PY_COLD, [SHA], ()) == (*PY_COLD, SHA)


def test_is_interpreter_recognises_cpython_binaries_only():
    assert is_interpreter(EVAL) and is_interpreter(LIBPY)
    assert is_interpreter(Frame("x", FrameKind.NATIVE, "/usr/bin/python3"))
    assert not is_interpreter(SHA)
    assert not is_interpreter(Frame("x", FrameKind.NATIVE, "/opt/pythonista/bin/tool"))


def test_merge_with_pyspy_native_stack_adds_only_kernel_frames():
    py_native = (*PY_HOT, SHA)  # py-spy --native ends in native frames
    assert merge_stack(py_native, [START, EVAL, SHA], KERNEL) == (*py_native, *KERNEL)


def test_interleave_puts_each_group_under_its_eval_frame():
    groups = [PY_HOT]  # innermost first
    assert interleave(groups, [START, EVAL, SHA], KERNEL) == (START, EVAL, *PY_HOT, SHA, *KERNEL)


def test_a_cut_unwind_is_marked_above_the_outermost_native_frame_found():
    # the unwind stopped below the eval frame: the group left over goes above the mark
    assert interleave([PY_HOT], [SHA], (), unwound=False) == (*PY_HOT, NOT_UNWOUND, SHA)
    # a native-only stack cut short starts with the mark; a whole one has none
    assert interleave([], [LIBPY, SHA], (), unwound=False) == (NOT_UNWOUND, LIBPY, SHA)
    assert interleave([PY_HOT], [SHA], ()) == (*PY_HOT, SHA)
    # no native frames at all: nothing to mark
    assert interleave([PY_HOT], [], KERNEL, unwound=False) == (*PY_HOT, *KERNEL)
