"""Rooting a cut stack through the same Python stack: learned roots, ambiguity, exec."""

from kubeprof.agent.cpu.merge import NOT_UNWOUND
from kubeprof.agent.cpu.stack_roots import RootMemo
from kubeprof.model import Frame, FrameKind


def _n(name: str, lib: str = "/usr/bin/python3.11") -> Frame:
    return Frame(name, FrameKind.NATIVE, lib)


def _py(name: str, line: int = 1) -> Frame:
    return Frame(name, FrameKind.PYTHON, "/app/main.py", line)


ROOT = (_n("_start"), _n("Py_RunMain"), _n("PyEval_EvalCode"), _n("_PyEval_EvalFrameDefault"))
BLAS = (_n("dgemm_thread_nn", "/lib/libopenblas.so"), _n("exec_blas", "/lib/libopenblas.so"))
CUT = (_py("<module>", 39), _py("matmul", 9), NOT_UNWOUND, *BLAS)


def test_a_cut_stack_gets_the_root_of_its_outermost_python_function():
    memo = RootMemo()
    assert memo.rooted(7, CUT) is None  # nothing learned yet
    memo.learn(7, (*ROOT, _py("<module>", 12), _py("load", 3)))
    assert memo.rooted(7, CUT) == (*ROOT, *CUT)
    # another process, another outermost function, a stack not starting with Python
    assert memo.rooted(8, CUT) is None
    assert memo.rooted(7, (_py("worker"), NOT_UNWOUND, *BLAS)) is None
    assert memo.rooted(7, (NOT_UNWOUND, *BLAS)) is None


def test_roots_are_learned_only_from_stacks_unwound_to_the_first_frame():
    memo = RootMemo()
    memo.learn(7, (NOT_UNWOUND, _n("PyEval_EvalCode"), _py("<module>")))
    memo.learn(7, (_py("<module>"), _py("main")))  # itself cut
    memo.learn(7, ROOT)  # no Python frame
    assert memo.rooted(7, CUT) is None


def test_a_function_entered_by_two_native_paths_is_left_cut():
    memo = RootMemo()
    via_a = (_n("start_thread"), _n("pool_a", "/lib/libx.so"), _n("_PyEval_EvalFrameDefault"))
    via_b = (_n("start_thread"), _n("pool_b", "/lib/libx.so"), _n("_PyEval_EvalFrameDefault"))
    memo.learn(7, (*via_a, _py("<module>")))
    memo.learn(7, (*via_b, _py("<module>")))
    assert memo.rooted(7, CUT) is None
    memo.learn(7, (*via_a, _py("<module>")))  # stays unknown
    assert memo.rooted(7, CUT) is None


def test_the_shorter_of_two_nested_roots_is_kept():
    # caught entering a call, the outermost Python frames sit one eval frame deeper
    deeper = (*ROOT, _n("PyObject_Call"), _n("_PyEval_EvalFrameDefault"))
    memo = RootMemo()
    memo.learn(7, (*deeper, _py("<module>")))
    memo.learn(7, (*ROOT, _py("<module>")))
    assert memo.rooted(7, CUT) == (*ROOT, *CUT)
    memo.learn(7, (*deeper, _py("<module>")))
    assert memo.rooted(7, CUT) == (*ROOT, *CUT)


def test_forget_drops_a_process_s_roots():
    memo = RootMemo()
    memo.learn(7, (*ROOT, _py("<module>")))
    memo.learn(8, (*ROOT, _py("<module>")))
    memo.forget(7)
    assert memo.rooted(7, CUT) is None
    assert memo.rooted(8, CUT) == (*ROOT, *CUT)
