"""On the GPU machine: do PyTorch's autograd sequence numbers link backward to forward here,
and what does reading them cost per launch? (issue 11; run by attribution_run.sh)

Prints one JSON line: for a few ops, the grad_fn's sequence number vs ``peek()`` read right
after the op (expected: peek == seq + 1), whether the engine thread sees its node, and the
cost of ``AutogradSeq.forward()`` / ``backward()`` (median of 5 x 100k calls).
"""

from __future__ import annotations

import json
import statistics
import threading
import time

import torch

from kubeprof.agent.gpu.autograd import AutogradSeq

seq = AutogradSeq()
out: dict = {"torch": torch.__version__}
x = torch.randn(8, 64, device="cuda", requires_grad=True)
lin = torch.nn.Linear(64, 64).cuda()
pairs = []
for op in (lambda t: lin(t), lambda t: torch.nn.functional.gelu(t), lambda t: t.sum()):
    y = op(x)
    pairs.append((y.grad_fn.name(), y.grad_fn._sequence_nr(), seq.forward()))
out["forward_pairs"] = pairs
out["peek_is_seq_plus_1"] = all(p == s + 1 for _, s, p in pairs)

seen = []


class Probe(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        ctx.fwd_peek = seq.forward()
        return t * 2

    @staticmethod
    def backward(ctx, g):
        seen.append((threading.current_thread().name, seq.backward(), ctx.fwd_peek))
        n = 20_000
        t0 = time.perf_counter()
        for _ in range(n):
            seq.backward()
        seen.append(("backward_ns", (time.perf_counter() - t0) / n * 1e9))
        return g * 2


Probe.apply(x).sum().backward()
out["engine_thread_sees_node"] = seen[:1]
out["backward_read_ns"] = seen[1][1] if len(seen) > 1 else None
runs = []
for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(100_000):
        seq.forward()
    runs.append((time.perf_counter() - t0) / 100_000 * 1e9)
out["forward_read_ns"] = statistics.median(runs)
out["error"] = seq.error
print(json.dumps(out), flush=True)
