"""Decoded stacks are handed out again as the same objects (the store finds their hashes
by identity), stay equal to what was sent, and the tables kept stay bounded."""

from __future__ import annotations

from kubeprof.model import Batch, CpuSample, Frame, FrameKind
from kubeprof.protocol import codec
from kubeprof.protocol.reuse import Reuse


def _stack(i: int, depth: int = 3) -> tuple[Frame, ...]:
    return tuple(Frame(f"f{i}_{d}", FrameKind.PYTHON, "/app/m.py", d) for d in range(depth))


def _body(stacks: list[tuple[Frame, ...]], batch_id: str) -> bytes:
    samples = tuple(CpuSample(i, 7, 7, "w", 0, s) for i, s in enumerate(stacks))
    return codec.encode(Batch(samples=samples), batch_id=batch_id, node="n")


def test_a_stack_decoded_again_is_the_same_object_and_equal_to_the_one_sent():
    hot, other = _stack(1), _stack(2)
    _, _, first = codec.decode(_body([hot, other, hot], "b1"))
    _, _, second = codec.decode(_body([other, hot], "b2"))
    assert [s.stack for s in first.samples] == [hot, other, hot]
    assert [s.stack for s in second.samples] == [other, hot]
    assert second.samples[1].stack is first.samples[0].stack
    assert second.samples[0].stack is first.samples[1].stack
    # a stack of the same frames in another order is another stack
    _, _, third = codec.decode(_body([tuple(reversed(hot))], "b3"))
    assert third.samples[0].stack == tuple(reversed(hot))


def test_the_tables_kept_start_over_past_their_budget_and_decode_the_same():
    r = Reuse(max_text=64 * 50, max_slots=60)
    for i in range(200):
        rows = [(f.name, f.kind, f.file, f.line) for f in _stack(i)]
        frames, serials = r.frames(rows)
        assert r.stack((2, 0, 1), frames, serials) == (frames[2], frames[0], frames[1])
        assert frames == list(_stack(i))
        assert r.kept()[0] <= 52 and r.kept()[1] <= 16
