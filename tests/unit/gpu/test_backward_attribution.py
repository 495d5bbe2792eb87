"""Backward kernels charged to their forward op's Python line, through the tracer and the
receiver, with a stand-in for PyTorch's autograd sequence numbers (autograd.py).

The stand-in behaves as PyTorch does: a forward op takes the next sequence number for its
autograd node, then launches its kernels; the engine later runs the nodes in reverse on a
thread with no Python frames (started here with ``_thread.start_new_thread``, which calls the
CUPTI callback straight from C, as the engine's thread does).
"""

from __future__ import annotations

import sys
import threading
import types

import pytest
from fake_cupti import FakeCupti

from kubeprof.agent.gpu import autograd as autograd_mod
from kubeprof.agent.gpu.launch_stacks import FOREIGN_MARKER
from kubeprof.agent.gpu.tracer import CuptiTracer, TracerConfig
from kubeprof.analysis.gpu_attribution import attribution


class FakeAutograd:
    """Per-thread sequence counter and the node the engine is running."""

    def __init__(self) -> None:
        self.seq = threading.local()
        self.nodes: dict[int, str] = {}
        self.current: types.SimpleNamespace | None = None

    def peek(self) -> int:
        return getattr(self.seq, "n", 0)

    def make_node(self, name: str) -> int:
        n = self.peek()
        self.seq.n = n + 1
        self.nodes[n] = name
        return n

    def module(self) -> types.ModuleType:
        c = types.ModuleType("torch._C")
        c._current_autograd_node = lambda: self.current  # type: ignore[attr-defined]
        return c


@pytest.fixture
def torch_like(monkeypatch):
    ag = FakeAutograd()
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setitem(sys.modules, "torch._C", ag.module())
    monkeypatch.setattr(autograd_mod, "_load_peek", lambda torch: ag.peek)
    return ag


def linear_forward(fk: FakeCupti, ag: FakeAutograd) -> int:
    ag.make_node("AddmmBackward0")
    return fk.launch("_Z4gemmv", duration=1000)  # the forward GEMM: launched on this line


def attention_forward(fk: FakeCupti, ag: FakeAutograd) -> int:
    ag.make_node("ViewBackward0")  # a view: a node, no kernel
    ag.make_node("FlashAttentionBackward0")
    return fk.launch("_Z9flash_fwdv", duration=3000)


def engine_runs(fk: FakeCupti, ag: FakeAutograd, seq: int, kernel: str) -> int:
    """The autograd engine's thread runs node ``seq`` (-1: none) and launches ``kernel``."""
    ag.current = None if seq < 0 else types.SimpleNamespace(_sequence_nr=lambda: seq)
    fk.native_thread = True
    try:
        return fk.launch(kernel, 2000)
    finally:
        fk.native_thread = False
        ag.current = None


def train_step(fk: FakeCupti, ag: FakeAutograd) -> list[tuple[int, str]]:
    """Forward (linear, attention), then backward in reverse; (seq, kernel) per backward."""
    linear_forward(fk, ag)
    lin = ag.peek() - 1
    attention_forward(fk, ag)
    att = ag.peek() - 1
    bwd = [(att, "_Z9flash_bwdv"), (lin, "_Z8gemm_dgv"), (lin, "_Z8gemm_wgv")]
    for seq, kernel in bwd:
        engine_runs(fk, ag, seq, kernel)
    return bwd


def test_backward_kernels_land_under_their_forward_op(fake, wire, torch_like):
    rx, tx = wire
    tr = CuptiTracer(tx, TracerConfig(kinds=("kernel",)))
    tr.start()
    tx.start()
    for _ in range(3):
        train_step(fake, torch_like)
    engine_runs(fake, torch_like, -1, "_Z10accumulatev")  # no node: the fallback
    tr.stop()
    acts = rx.stop(2.0).gpu_activities
    by_name: dict[str, list] = {}
    for a in acts:
        by_name.setdefault(a.name, []).append(a)
    assert {k: len(v) for k, v in by_name.items()} == {
        "_Z4gemmv": 3,
        "_Z9flash_fwdv": 3,
        "_Z9flash_bwdv": 3,
        "_Z8gemm_dgv": 3,
        "_Z8gemm_wgv": 3,
        "_Z10accumulatev": 1,
    }
    here = __file__.rsplit("/", 1)[-1]
    lin_line = linear_forward.__code__.co_firstlineno + 2
    att_line = attention_forward.__code__.co_firstlineno + 3

    def marker(a) -> str:
        return a.stack[-2].name

    def label_of(forward) -> str:  # what the receiver names a forward launch's op
        leaf = forward.stack[-2]
        return f"backward of {leaf.name} ({leaf.file.rsplit('/', 1)[-1]}:{leaf.line})"

    gemm, flash = by_name["_Z4gemmv"][0], by_name["_Z9flash_fwdv"][0]
    assert ("linear_forward", here, lin_line) in {
        (f.name, f.file.rsplit("/", 1)[-1], f.line) for f in gemm.stack
    }
    for name in ("_Z8gemm_dgv", "_Z8gemm_wgv"):
        for a in by_name[name]:
            assert marker(a) == label_of(gemm)
            assert a.stack[:-2] == gemm.stack[:-1]  # the forward launch's Python frames
    for a in by_name["_Z9flash_bwdv"]:
        assert marker(a) == label_of(flash)
        assert "attention_forward" in [f.name for f in a.stack]
        assert att_line in [f.line for f in a.stack if f.name == "attention_forward"]
    for a in by_name["_Z10accumulatev"]:
        assert marker(a) == FOREIGN_MARKER
    att = attribution(acts)
    bwd_ns = sum(
        a.end_ns - a.start_ns
        for n in ("_Z9flash_bwdv", "_Z8gemm_dgv", "_Z8gemm_wgv")
        for a in by_name[n]
    )
    assert att.via_backward_ns == bwd_ns
    assert att.via_main_ns == 2000
    assert att.share == 1.0


def test_without_sequence_numbers_backward_falls_back_to_the_main_thread(
    fake,
    wire,
    torch_like,
):
    rx, tx = wire
    tr = CuptiTracer(tx, TracerConfig(kinds=("kernel",), backward=False))
    tr.start()
    tx.start()
    train_step(fake, torch_like)
    tr.stop()
    acts = rx.stop(2.0).gpu_activities
    bwd = [a for a in acts if a.name.endswith("bwdv") or a.name.startswith("_Z8gemm_")]
    assert len(bwd) == 3 and all(a.stack[-2].name == FOREIGN_MARKER for a in bwd)
    assert not tx.queues["autograd"]
    assert attribution(acts).via_backward_ns == 0


def test_without_torch_or_its_api_the_link_is_off_and_says_why():
    seq = autograd_mod.AutogradSeq(modules={})
    assert seq.forward() == autograd_mod.NONE and seq.backward() == autograd_mod.NONE
    assert not seq.error  # no torch: nothing to say
    old = {"torch": types.ModuleType("torch"), "torch._C": types.ModuleType("torch._C")}
    seq = autograd_mod.AutogradSeq(modules=old)  # a torch without _current_autograd_node
    assert seq.forward() == autograd_mod.NONE and seq.backward() == autograd_mod.NONE
    assert "autograd sequence numbers unavailable" in seq.error


def test_nodes_without_a_forward_op_are_not_linked(torch_like):
    """AccumulateGrad carries UINT64_MAX: such a launch keeps the main-thread fallback."""
    seq = autograd_mod.AutogradSeq()
    torch_like.current = types.SimpleNamespace(_sequence_nr=lambda: 2**64 - 1)
    assert seq.backward() == autograd_mod.NONE
    torch_like.current = types.SimpleNamespace(_sequence_nr=lambda: 41)
    assert seq.backward() == 41
    torch_like.make_node("X")
    assert seq.forward() == 1
