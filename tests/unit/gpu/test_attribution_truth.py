"""Ground truth for the kernel <-> Python line join, on the H200's raw train_torch captures.

Each capture is replayed through the real receiver (``capture.replay``), so a broken join in
today's code fails here; what is asserted comes from the workload, not from a recording:
the model's structure (``examples/train_torch.py``: 8 blocks, each ``Attention`` with two
``Linear`` layers and ``Mlp`` with two, a ``Linear`` head; 12 steps in the recorded command)
and which thread launched each kernel (the raw launch records: the autograd engine's thread
launches the backward pass, the main thread the forward pass and the optimizer).

- ``train_torch``: recorded before backward attribution: backward kernels are shown under
  the main thread's stack, at ``loss.backward()``, and counted as that fallback;
- ``train_torch_autograd``: backward kernels charged to the forward op that made their
  autograd node, as ``backward of Linear.forward (linear.py:134)`` under that op's stack;
- ``hook_c/train_torch``: the same with the C launch hook (issue 14): same assertions.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from kubeprof.agent.gpu.capture import DATA, read_capture, replay
from kubeprof.agent.gpu.launch_stacks import FOREIGN_MARKER
from kubeprof.agent.gpu.stack_join import NO_FORWARD
from kubeprof.agent.gpu.wire import FrameDecoder
from kubeprof.analysis.gpu_attribution import NO_FORWARD_PREFIX, attribution
from kubeprof.analysis.gpu_summary import gpu_summary
from kubeprof.model import FrameKind, GpuActivity
from kubeprof.report.gpu import render_gpu_text
from kubeprof.report.json_report import _gpu

REPO = Path(__file__).resolve().parents[3]
TRUTH = REPO / "tests" / "fixtures" / "gpu" / "truth"
WORKLOAD = REPO / "examples" / "train_torch.py"
C_HOOK = "hook_c/train_torch"  # recorded with the C launch hook, backward attribution on
STEPS, LAYERS = 12, 8  # --steps 12 (the recorded command), TinyGpt's default layers
FORWARD_GEMMS = STEPS * (4 * LAYERS + 1)  # qkv, proj, up, down per block + the head


def _line(pattern: str) -> int:
    """Line of the workload's source matching ``pattern`` (exactly one)."""
    hits = [
        n for n, text in enumerate(WORKLOAD.read_text().splitlines(), 1) if re.search(pattern, text)
    ]
    assert len(hits) == 1, (pattern, hits)
    return hits[0]


# the model's call sites, found in its source
QKV, SDPA, PROJ = (
    _line(r"self\.qkv\(x\)"),
    _line(r"scaled_dot_product_attention\("),
    _line(r"return self\.proj\("),
)
MLP = _line(r"self\.down\(F\.gelu\(self\.up")
HEAD = _line(r"return self\.head\(")
BACKWARD_CALL, OPT_STEP = _line(r"loss\.backward\(\)"), _line(r"opt\.step\(\)")


@cache
def _replayed(name: str) -> tuple[list[GpuActivity], dict[int, int]]:
    """Kernels as the current receiver joins them, and each launch's thread (raw records)."""
    kernels = [
        a for a in replay(TRUTH / f"{name}.kpgcap.gz").batch.gpu_activities if a.kind == "kernel"
    ]
    decoder, tids = FrameDecoder(), {}
    for kind, _conn, _ts, payload in read_capture(TRUTH / f"{name}.kpgcap.gz"):
        if kind == DATA:
            for _header, records in decoder.feed(payload):
                tids.update((r[0], r[3]) for r in records.get("launch", ()))
    return kernels, tids


def _threads(name: str) -> tuple[list[GpuActivity], list[GpuActivity]]:
    """(main thread's kernels, autograd engine thread's kernels) by the raw launch thread."""
    kernels, tids = _replayed(name)
    main = tids[min(tids)]  # the first launch (model set-up) is the main thread's
    assert len(set(tids.values())) == 2  # main + pt_autograd_0, nothing else launched
    fwd = [k for k in kernels if tids[k.correlation_id] == main]
    bwd = [k for k in kernels if tids[k.correlation_id] != main]
    return fwd, bwd


def _workload_frames(a: GpuActivity) -> list[tuple[str, int]]:
    return [(f.name, f.line) for f in a.stack if f.file.endswith("train_torch.py")]


def _python_leaf(a: GpuActivity) -> tuple[str, str]:
    leaf = [f for f in a.stack if f.kind is FrameKind.PYTHON][-1]
    return leaf.name, leaf.file.rsplit("/", 1)[-1]


def _gemm(a: GpuActivity) -> bool:
    return a.demangled.startswith("nvjet_")  # cuBLAS on the H200, launched by the driver


def _flash(a: GpuActivity, direction: str) -> bool:
    return "sdpa" in a.demangled and f"flash_{direction}" in a.demangled


@pytest.mark.parametrize("name", ["train_torch", "train_torch_autograd", C_HOOK])
def test_forward_gemms_are_under_linear_forward_at_each_layer_call(name):
    fwd, _ = _threads(name)
    gemms = [k for k in fwd if _gemm(k)]
    assert len(gemms) == FORWARD_GEMMS
    assert {_python_leaf(k) for k in gemms} == {("Linear.forward", "linear.py")}
    # where in the model: the innermost line of train_torch.py that called the layer
    sites = Counter(_workload_frames(k)[-1] for k in gemms)
    assert sites == {
        ("Attention.forward", QKV): STEPS * LAYERS,
        ("Attention.forward", PROJ): STEPS * LAYERS,
        ("Mlp.forward", MLP): 2 * STEPS * LAYERS,  # up and down on one line
        ("TinyGpt.forward", HEAD): STEPS,
    }


@pytest.mark.parametrize("name", ["train_torch", "train_torch_autograd", C_HOOK])
def test_flash_attention_forward_is_under_attention_forward(name):
    fwd, _ = _threads(name)
    flash = [k for k in fwd if _flash(k, "fprop")]
    assert len(flash) == STEPS * LAYERS
    # the call spans lines SDPA..SDPA+2; Python names a line inside it
    assert all(_workload_frames(k)[-1][0] == "Attention.forward" for k in flash)
    assert {_workload_frames(k)[-1][1] for k in flash} <= {SDPA, SDPA + 1, SDPA + 2}


@pytest.mark.parametrize("name", ["train_torch", "train_torch_autograd", C_HOOK])
def test_optimizer_kernels_are_under_the_optimizer_step(name):
    fwd, _ = _threads(name)
    adam = [k for k in fwd if "multi_tensor_apply" in k.demangled]
    assert len(adam) >= STEPS  # fused AdamW: a few multi-tensor launches per step
    for k in adam:
        names = [f.name for f in k.stack]
        assert "Adam.step" in names, names
        assert _workload_frames(k)[-1] == ("train_step", OPT_STEP)


def test_backward_before_autograd_attribution_is_the_main_thread_fallback():
    fwd, bwd = _threads("train_torch")
    assert len(bwd) > 0.4 * (len(fwd) + len(bwd))
    for k in bwd:
        assert k.stack[-2].name == FOREIGN_MARKER
        assert _workload_frames(k)[-1] == ("train_step", BACKWARD_CALL)
    for k in fwd:
        assert FOREIGN_MARKER not in [f.name for f in k.stack]
    att = attribution(fwd + bwd)
    bwd_ns = sum(k.end_ns - k.start_ns for k in bwd)
    assert att.via_main_ns == bwd_ns and att.via_backward_ns == 0
    assert att.via_main_share == pytest.approx(0.61, abs=0.02)  # as the H200 recorded


@pytest.mark.parametrize("name", ["train_torch_autograd", C_HOOK])
def test_backward_gemms_land_under_backward_of_their_forward_linear(name):
    fwd, bwd = _threads(name)
    gemms = [k for k in bwd if _gemm(k)]
    # each forward GEMM has two in backward (input and weight gradients)
    assert len(gemms) == 2 * FORWARD_GEMMS
    assert {k.stack[-2].name for k in gemms} == {"backward of Linear.forward (linear.py:134)"}
    fwd_sites = Counter(_workload_frames(k)[-1] for k in fwd if _gemm(k))
    bwd_sites = Counter(_workload_frames(k)[-1] for k in gemms)
    assert bwd_sites == Counter({site: 2 * n for site, n in fwd_sites.items()})


@pytest.mark.parametrize("name", ["train_torch_autograd", C_HOOK])
def test_flash_attention_backward_lands_under_backward_of_attention_forward(name):
    _, bwd = _threads(name)
    flash = [k for k in bwd if _flash(k, "bprop")]
    assert len(flash) == STEPS * LAYERS
    for k in flash:
        site = _workload_frames(k)[-1]
        assert site[0] == "Attention.forward" and SDPA <= site[1] <= SDPA + 2
        assert k.stack[-2].name == f"backward of Attention.forward (train_torch.py:{site[1]})"


@pytest.mark.parametrize("name", ["train_torch_autograd", C_HOOK])
def test_backward_kernels_are_charged_to_a_forward_op_or_kept_as_unmatched(name):
    fwd, bwd = _threads(name)
    markers = Counter(k.stack[-2].name.split(" (")[0] for k in bwd)
    assert FOREIGN_MARKER not in markers  # no backward kernel left to the fallback
    assert set(markers) <= {
        "backward of Linear.forward",
        "backward of layer_norm",
        "backward of Attention.forward",
        "backward of Mlp.forward",
        "backward of Block.forward",
        "backward of cross_entropy",
        "backward of embedding",
        "backward of TinyGpt.forward",
        "backward of train_step",
        NO_FORWARD,
    }
    bwd_ns = sum(k.end_ns - k.start_ns for k in bwd)
    unmatched = [k for k in bwd if k.stack[-2].name == NO_FORWARD]
    # unmatched: unbind's backward (a cat) in each Attention; the view made no kernel to
    # take its line from. Kept, with no Python frame, and counted as unattributed
    assert len(unmatched) == STEPS * LAYERS
    assert all("CatArrayBatchedCopy" in k.demangled for k in unmatched)
    assert not any(f.kind is FrameKind.PYTHON for k in unmatched for f in k.stack)
    att = attribution(fwd + bwd)
    unmatched_ns = sum(k.end_ns - k.start_ns for k in unmatched)
    assert att.total_ns - att.attributed_ns == unmatched_ns
    # ... and counted apart, so the report says what the unattributed time is
    assert att.no_forward_ns == unmatched_ns
    assert NO_FORWARD.startswith(NO_FORWARD_PREFIX)
    assert att.via_backward_ns == bwd_ns - unmatched_ns
    assert att.via_main_ns == 0
    assert att.own_line_share > 0.98  # was 0.39 with the fallback (test above)


def test_the_report_says_what_the_unattributed_kernel_time_is():
    """train_torch's only kernels without a Python stack are unbind's backward cats: the
    text report names them with their share, and the JSON carries the same share."""
    kernels, _tids = _replayed(C_HOOK)
    s = gpu_summary(kernels, (), min(k.start_ns for k in kernels), max(k.end_ns for k in kernels))
    no_fwd = sum(k.end_ns - k.start_ns for k in kernels if k.stack[-2].name == NO_FORWARD)
    assert no_fwd and s.unattributed_no_forward_ns == no_fwd
    assert s.attributed_ns + no_fwd == s.kernel_ns  # nothing else left unexplained
    text = render_gpu_text(s)
    share = f"{100 * no_fwd / s.kernel_ns:.1f} %"
    assert f"  not attributed: {share} backward kernels of autograd nodes whose forward op" in text
    assert _gpu(s)["unattributed_no_forward_share"] == pytest.approx(no_fwd / s.kernel_ns)
