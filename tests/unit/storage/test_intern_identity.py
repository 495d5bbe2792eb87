"""An Interner finds a stack's hash by identity for a stack object seen before (the
ingest's decoder hands the same tuple out again), and by value for any other."""

from __future__ import annotations

from kubeprof.model import Frame, FrameKind, stack_hash
from kubeprof.storage import intern
from kubeprof.storage.intern import Interner


def _stack(depth: int = 3) -> tuple[Frame, ...]:
    return tuple(Frame(f"f{d}", FrameKind.PYTHON, "/app/m.py", d) for d in range(depth))


def test_the_store_finds_a_hash_by_identity_and_by_value():
    interner = Interner()
    a, b = _stack(), _stack()  # equal, distinct objects
    assert a is not b
    assert interner.hash_of(a) == interner.hash_of(b) == stack_hash(a)
    assert interner.hash_of(a) == stack_hash(a)  # found by identity the second time


def test_the_stacks_kept_for_it_are_bounded(monkeypatch):
    monkeypatch.setattr(intern, "HASH_SLOTS_MAX", 40)
    interner = Interner()
    for depth in range(1, 200):
        stack = _stack(depth % 7 + 1)
        assert interner.hash_of(stack) == stack_hash(stack)
        assert interner.kept_slots() <= 40 + 8
