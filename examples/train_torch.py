"""A small GPT-style language model trained on random tokens: a realistic PyTorch loop to profile.

The DataLoader can be made slow (``--slow-ms`` or KUBEPROF_EXAMPLE_SLOW_MS: extra milliseconds
of CPU work per batch), which leaves the GPU idle between steps: the case kubeprof's GPU idle
ratio is meant to expose.

    python examples/train_torch.py --steps 300
    KUBEPROF_EXAMPLE_SLOW_MS=20 python examples/train_torch.py
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


class RandomTokens(Dataset):
    """Deterministic random token sequences; ``slow_ms`` of busy CPU work per sample."""

    def __init__(self, n: int, seq: int, vocab: int, slow_ms: float) -> None:
        self.n, self.seq, self.vocab, self.slow_ms = n, seq, vocab, slow_ms

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.slow_ms:
            time.sleep(self.slow_ms / 1000.0)  # stands for decoding / augmentation
        g = torch.Generator().manual_seed(idx)
        tokens = torch.randint(0, self.vocab, (self.seq + 1,), generator=g)
        return tokens[:-1], tokens[1:]


class Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Mlp(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.mlp = Attention(d, heads), Mlp(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGpt(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, seq, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos[:, : idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def train_step(
    model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument(
        "--slow-ms",
        type=float,
        default=float(os.environ.get("KUBEPROF_EXAMPLE_SLOW_MS", "0")),
        help="extra CPU ms per sample in the DataLoader (default: $KUBEPROF_EXAMPLE_SLOW_MS or 0)",
    )
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("train_torch.py needs a CUDA GPU")
    torch.manual_seed(0)
    dev = torch.device("cuda")
    data = RandomTokens(args.steps * args.batch, args.seq, args.vocab, args.slow_ms / args.batch)
    loader = DataLoader(data, batch_size=args.batch, num_workers=args.workers, pin_memory=True)
    model = TinyGpt(args.vocab, args.d_model, args.layers, max(1, args.d_model // 64), args.seq).to(
        dev
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    t0 = time.perf_counter()
    for step, (x, y) in enumerate(loader):
        torch.cuda.nvtx.range_push("train_step")
        loss = train_step(model, opt, x.to(dev, non_blocking=True), y.to(dev, non_blocking=True))
        torch.cuda.nvtx.range_pop()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item():.3f}", flush=True)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(
        f"{args.steps} steps in {dt:.2f} s ({args.steps / dt:.1f} steps/s, slow_ms={args.slow_ms})"
    )


if __name__ == "__main__":
    main()
