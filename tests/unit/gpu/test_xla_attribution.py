"""JAX/XLA kernels charged to the Python line of their op, on a real H200 recording.

The fixture (tests/fixtures/gpu/xla, recorded by tests/gpu/xla_run.sh) is the raw capture of
`kubeprof record --gpu -- python examples/train_jax.py --steps 20` and the optimised HLO
modules JAX dumped during it. Replaying it re-runs the receiver's whole join (kernel ->
module schedule step -> HLO op -> Python stack), so these tests fail when a kernel lands on
the wrong op. Ground truth is the model's structure (examples/train_jax.py): per training
step, 3 hidden-layer GEMMs at ``x = jax.nn.gelu(x @ w + b)`` and 1 output GEMM at
``return x @ w + b``, 7 backward GEMMs (XLA's ``transpose(jvp(...))`` ops of those lines),
and the optimiser's update under ``train_step``'s lambda.
"""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import pytest

from kubeprof.agent.gpu.capture import replay
from kubeprof.agent.gpu.inject import tracer_env, xla_dump_dir
from kubeprof.agent.gpu.xla_hlo import XlaIndex, is_library_kernel, kernel_name, parse_module
from kubeprof.analysis.gpu_attribution import XLA_PREFIX, attribution
from kubeprof.model import FrameKind, GpuActivity

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures" / "gpu" / "xla"
CAPTURE = FIX / "train_jax.kpgcap.gz"
DUMP = FIX / "train_jax.xla"
SOURCE = (ROOT / "examples" / "train_jax.py").read_text().splitlines()


def _line_of(text: str) -> int:
    return next(i for i, line in enumerate(SOURCE, 1) if line.strip() == text)


HIDDEN = _line_of("x = jax.nn.gelu(x @ w + b)")
OUTPUT = _line_of("return x @ w + b")


@pytest.fixture(scope="module")
def kernels() -> list[GpuActivity]:
    acts = replay(CAPTURE, xla_dump_dir=DUMP).batch.gpu_activities
    return sorted((a for a in acts if a.kind == "kernel"), key=lambda a: a.start_ns)


def _train_step_module() -> str:
    path = next(DUMP.glob("*jit_train_step*after_optimizations.txt.gz"))
    return gzip.decompress(path.read_bytes()).decode()


def _steady(kernels: list[GpuActivity]) -> list[GpuActivity]:
    """Training steps 2-20: from the second run of the step's first kernel (the input's
    convert) on; compilation, autotuning and the first run come before."""
    starts = [
        i
        for i, a in enumerate(kernels)
        if a.name == "wrapped_convert" and any("jit_train_step:" in f.name for f in a.stack)
    ]
    assert len(starts) == 19
    return kernels[starts[0] :]


def _op(a: GpuActivity) -> tuple[str, str, int]:
    """(JAX op, innermost Python function, line) the kernel was charged to."""
    label = next(f.name for f in a.stack if f.name.startswith(XLA_PREFIX))
    leaf = [f for f in a.stack if f.kind is FrameKind.PYTHON][-1]
    return label.split(": ", 1)[1].rstrip("]"), leaf.name, leaf.line


def test_the_module_schedule_holds_every_gemm_with_its_python_stack():
    module, steps = parse_module(_train_step_module())
    assert module == "jit_train_step"
    gemms = [s.op for s in steps if not s.kernel]
    assert len(gemms) == 11 and all(op is not None for op in gemms)
    forward = Counter(op.stack[-1].line for op in gemms if op and "transpose" not in op.op_name)
    assert forward == {HIDDEN: 3, OUTPUT: 1}
    op = gemms[0]
    assert op is not None
    assert [f.name for f in op.stack][-3:] == ["train_step", "loss_fn", "forward"]
    assert op.stack[-1].file.endswith("examples/train_jax.py")
    # Identical fusions run one kernel named after the first of them in the schedule.
    names = [s.kernel for s in steps if s.kernel]
    assert names.count("loop_convert_multiply_fusion") == 3
    assert names.count("input_reduce_fusion_3") == 3 and "input_reduce_fusion_2" not in names


def test_steady_state_kernels_are_charged_to_their_ops_line(kernels):
    steady = _steady(kernels)
    att = attribution(steady)
    assert att.via_xla_share == 1.0 and att.via_main_share == 0.0
    steps = 19
    gemm = Counter(_op(a) for a in steady if is_library_kernel(a.name))
    assert sum(gemm.values()) == 11 * steps
    assert gemm[("jit(train_step)/jvp()/dot_general", "forward", HIDDEN)] == 3 * steps
    assert gemm[("jit(train_step)/jvp()/dot_general", "forward", OUTPUT)] == steps
    backward = sum(n for (op, _f, _l), n in gemm.items() if "transpose(jvp())" in op)
    assert backward == 7 * steps
    update = Counter(_op(a) for a in steady if a.name.startswith("wrapped_subtract"))
    assert set(update) == {("jit(train_step)/sub", "train_step.<locals>.<lambda>", 64)}
    assert sum(update.values()) == 4 * steps


def test_without_the_dump_the_same_capture_falls_back_to_the_main_thread():
    acts = replay(CAPTURE).batch.gpu_activities
    att = attribution(acts)
    assert att.via_xla_ns == 0 and att.via_main_share > 0.95


def test_index_reads_gzipped_and_plain_dumps(tmp_path):
    (tmp_path / "module_1.jit_f.sm_9.0a_gpu_after_optimizations.txt").write_text(
        _train_step_module()
    )
    ix = XlaIndex(tmp_path)
    pos = ix.place("loop_convert_multiply_fusion", None)
    assert pos is not None and ix.modules == 1
    op = ix.op(pos)
    assert op is not None and op.stack[-1].line == HIDDEN


def test_library_kernels_are_told_from_xlas_own():
    assert is_library_kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NTT")
    assert not is_library_kernel("loop_convert_multiply_fusion")
    assert not is_library_kernel("gemm_fusion_dot_general_12")
    assert not is_library_kernel("_ZN15stream_executor3gpu17xla_fp_comparisonIN5Eigen8bfloat16E")
    assert kernel_name("cublas-lt-matmul.1") == "cublas_lt_matmul_1"


def test_the_recorder_asks_jax_for_the_dump_and_keeps_users_flags():
    assert xla_dump_dir("/run/s.sock", {}).path == "/run/s.sock.xla"
    assert xla_dump_dir("/run/s.sock", {}).ours
    assert xla_dump_dir("/run/s.sock", {"KUBEPROF_GPU_XLA_DUMP": "0"}).path is None
    kept = xla_dump_dir("/run/s.sock", {"KUBEPROF_GPU_XLA_DUMP": "/data/hlo"})
    assert kept.path == "/data/hlo" and not kept.ours
    env = tracer_env(
        "/run/s.sock",
        base={"XLA_FLAGS": "--xla_gpu_autotune_level=0"},
        xla_dump_dir="/run/s.sock.xla",
    )
    assert env["XLA_FLAGS"] == (
        "--xla_gpu_autotune_level=0 --xla_dump_to=/run/s.sock.xla --xla_dump_hlo_as_text"
    )
    assert "XLA_FLAGS" not in tracer_env("/run/s.sock", base={})
