"""Ground-truth workloads off the training-loop shape: each times its own work and prints it.

``examples/gpu_truth.py`` covers loops with a steady kernel rhythm. These are the shapes on
which a profiler's verdict is easily confidently wrong, each measuring itself (CUDA events
for the GPU, ``time.perf_counter`` accounting for what the main thread did) and printing ONE
line at the end::

    KUBEPROF_TRUTH {"mode": ..., "wall_ms": ..., "gpu_busy_ms": ..., "idle_ratio": ...,
                    "host": {"waiting_ms": ..., ...}, ...}

Modes (``--mode``):

- ``serve``: an inference server with irregular traffic. A client thread sends requests at
  random (exponential gaps); the server blocks in ``wait_for_request`` (``queue.get``) until
  one comes, tokenizes it in pure Python (``tokenize``), runs a small MLP on the GPU
  (``run_model``) and reads the answer back (``read_answer``, a sync). Mostly waiting.
- ``copyonly``: one pageable host-to-device copy per step (``copy_batch``), no kernels in
  the loop: the copy engine keeps the GPU busy almost all the time.
- ``loader``: a training step fed by a ``torch.utils.data.DataLoader`` whose workers build
  each sample in pure Python (``make_sample``); the main thread takes the next batch in
  ``next_batch`` and runs ``train_step`` (copy + matmuls) inside an NVTX range ``step``.
  ``--workers``, ``--pinned``, ``--item-ms``, ``--side`` and ``--matmuls`` set whether the
  loader keeps up (``loader_ok``), cannot (``loader_starved``), or copies big pageable
  batches (``loader_pageable``).

Host timestamps of the main loop (``main_start_ns``/``main_end_ns``, CLOCK_MONOTONIC, the
clock of kubeprof's records) let an analysis cut exactly the loop's window.

    python examples/gpu_shapes.py --mode serve --seconds 6
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import sys
import threading
import time
from typing import Any

import torch

MODES = ("serve", "copyonly", "loader")
N_BIG = 8192


def _ev() -> torch.cuda.Event:
    e = torch.cuda.Event(enable_timing=True)
    e.record()
    return e


# ---- serve ----
def wait_for_request(q: queue.Queue) -> str | None:
    """Block until a client sends a request (off CPU: a condition wait)."""
    return q.get()


def tokenize(text: str, vocab: int) -> list[int]:
    """A pure-Python tokenizer: character-level hashing of each word."""
    ids: list[int] = []
    for word in text.split():
        h = 2166136261
        for ch in word:
            h = ((h ^ ord(ch)) * 16777619) & 0xFFFFFFFF
        ids.append(h % vocab)
    return ids


def run_model(model: torch.nn.Module, emb: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """Embed the tokens and run the MLP on the GPU."""
    t = torch.tensor(ids, device="cuda")
    return model(emb[t].mean(0, keepdim=True))


def read_answer(out: torch.Tensor) -> int:
    """Read the predicted id back to the host (device->host copy + sync)."""
    return int(out.argmax(-1).item())


def client(q: queue.Queue, seconds: float, mean_gap_ms: float, words: int, seed: int) -> None:
    """Sends requests at random: exponential gaps, then a None to stop the server."""
    rng = random.Random(seed)
    end = time.perf_counter() + seconds
    alphabet = "abcdefghijklmnopqrstuvwxyz"
    while time.perf_counter() < end:
        time.sleep(rng.expovariate(1000.0 / mean_gap_ms))
        text = " ".join(
            "".join(rng.choice(alphabet) for _ in range(rng.randint(3, 12))) for _ in range(words)
        )
        q.put(text)
    q.put(None)


def serve(args: argparse.Namespace) -> dict[str, Any]:
    vocab, d = 32000, 1024
    g = torch.Generator(device="cuda").manual_seed(0)
    emb = torch.randn(vocab, d, device="cuda", generator=g, dtype=torch.bfloat16)
    model = torch.nn.Sequential(
        torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, vocab)
    ).to("cuda", torch.bfloat16)
    with torch.no_grad():  # warm-up: cuBLAS handles, allocator, kernels
        for i in range(20):
            read_answer(run_model(model, emb, tokenize(f"warm up request {i}", vocab)))
    torch.cuda.synchronize()
    q: queue.Queue = queue.Queue()
    th = threading.Thread(
        target=client, args=(q, args.seconds, args.gap_ms, args.words, 1), name="client"
    )
    acc = {"waiting_ms": 0.0, "tokenize_ms": 0.0, "model_host_ms": 0.0, "read_ms": 0.0}
    pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
    served = 0
    main_start_ns = time.monotonic_ns()
    t0 = time.perf_counter()
    th.start()
    with torch.no_grad():
        while True:
            a = time.perf_counter()
            text = wait_for_request(q)
            b = time.perf_counter()
            acc["waiting_ms"] += (b - a) * 1e3
            if text is None:
                break
            ids = tokenize(text, vocab)
            c = time.perf_counter()
            acc["tokenize_ms"] += (c - b) * 1e3
            s = _ev()
            out = run_model(model, emb, ids)
            pairs.append((s, _ev()))
            dd = time.perf_counter()
            acc["model_host_ms"] += (dd - c) * 1e3
            read_answer(out)
            acc["read_ms"] += (time.perf_counter() - dd) * 1e3
            served += 1
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3
    main_end_ns = time.monotonic_ns()
    th.join()
    busy = sum(x.elapsed_time(y) for x, y in pairs)
    return {
        "wall_ms": round(wall_ms, 3),
        "wall_source": "perf_counter",
        "gpu_busy_ms": round(busy, 3),
        "busy_source": "event pair around each request's GPU work (includes launch gaps)",
        "busy_includes": "kernels+copies",
        "requests": served,
        "mean_gap_ms": args.gap_ms,
        "host": {k: round(v, 3) for k, v in acc.items()},
        "host_share": {k: round(v / wall_ms, 4) for k, v in acc.items()},
        "host_functions": {
            "waiting": "wait_for_request",
            "tokenize": "tokenize",
            "model": "run_model",
            "read": "read_answer",
        },
        "main_start_ns": main_start_ns,
        "main_end_ns": main_end_ns,
    }


# ---- copyonly ----
def copy_batch(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Host->device copy of the next batch from pageable memory."""
    dst.copy_(src)  # KUBEPROF_SHAPES_COPY_LINE


def copyonly(args: argparse.Namespace) -> dict[str, Any]:
    n = args.copy_mb * (1 << 20) // 4
    src = torch.randn(n, generator=torch.Generator().manual_seed(0))
    dst = torch.empty(n, device="cuda")
    for _ in range(args.warmup):
        copy_batch(dst, src)
    torch.cuda.synchronize()
    pairs = []
    main_start_ns = time.monotonic_ns()
    t0 = time.perf_counter()
    a = _ev()
    for _ in range(args.steps):
        s = _ev()
        copy_batch(dst, src)
        pairs.append((s, _ev()))
    b = _ev()
    torch.cuda.synchronize()
    host_ms = (time.perf_counter() - t0) * 1e3
    main_end_ns = time.monotonic_ns()
    wall_ms = a.elapsed_time(b)
    busy = sum(x.elapsed_time(y) for x, y in pairs)
    nbytes = n * 4
    return {
        "wall_ms": round(wall_ms, 3),
        "wall_source": "loop_events",
        "host_wall_ms": round(host_ms, 3),
        "gpu_busy_ms": round(busy, 3),
        "busy_source": "event pair around each copy",
        "busy_includes": "copies",
        "kernels_per_step": 0,
        "copies_per_step": 1,
        "pinned": False,
        "bytes_copied_per_step": nbytes,
        "achieved_gb_s": round(nbytes * args.steps / (busy / 1e3) / 1e9, 2) if busy else None,
        "copy_function": "copy_batch",
        "copy_line": _line_of("KUBEPROF_SHAPES_COPY_LINE"),
        "steps": args.steps,
        "main_start_ns": main_start_ns,
        "main_end_ns": main_end_ns,
    }


# ---- loader ----
def make_sample(i: int, item_ms: float, side: int) -> torch.Tensor:
    """A worker's per-sample work: pure-Python decoding/augmentation for ``item_ms``."""
    deadline = time.perf_counter() + item_ms / 1000.0
    x = i
    while time.perf_counter() < deadline:
        for k in range(100):
            x = (x * 1_103_515_245 + k) & 0x7FFFFFFF
    return torch.full((3, side, side), float(x % 255) / 255.0)


class SyntheticImages(torch.utils.data.Dataset):
    """Images made on the fly by ``make_sample`` (the workers' CPU time is spent there)."""

    def __init__(self, n: int, item_ms: float, side: int) -> None:
        self.n, self.item_ms, self.side = n, item_ms, side

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return make_sample(i, self.item_ms, self.side)


def next_batch(it: Any) -> torch.Tensor:
    """The main thread takes the next batch from the loader (blocks while workers are behind)."""
    return next(it)


def train_step(
    batch: torch.Tensor,
    w: torch.Tensor,
    a: torch.Tensor,
    matmuls: int,
    pinned: bool,
    copy_pairs: list,
    pairs: list,
) -> None:
    """Copy the batch to the GPU, then a projection and ``matmuls`` big matmuls."""
    s = _ev()
    x = batch.to("cuda", non_blocking=pinned)
    c = _ev()
    copy_pairs.append((s, c))
    y = x.view(x.shape[0], -1)[:, : w.shape[0]].to(torch.bfloat16) @ w
    for _ in range(matmuls):
        a = a @ a
        a = a / 64.0
    y.sum()
    pairs.append((s, _ev()))


def loader(args: argparse.Namespace) -> dict[str, Any]:
    steps, bs = args.steps, args.batch
    ds = SyntheticImages((steps + args.warmup + 8) * bs, args.item_ms, args.side)
    dl = torch.utils.data.DataLoader(
        ds,
        batch_size=bs,
        num_workers=args.workers,
        pin_memory=args.pinned,
        prefetch_factor=2 if args.workers else None,
        persistent_workers=False,
    )
    g = torch.Generator(device="cuda").manual_seed(0)
    feat = min(3 * args.side * args.side, 4096)
    w = torch.randn(feat, 1024, device="cuda", dtype=torch.bfloat16, generator=g)
    a = torch.randn(N_BIG, N_BIG, device="cuda", dtype=torch.bfloat16, generator=g) / 100
    it = iter(dl)
    cp: list = []
    pr: list = []
    for _ in range(args.warmup):
        train_step(next_batch(it), w, a, args.matmuls, args.pinned, cp, pr)
    torch.cuda.synchronize()
    copy_pairs: list = []
    pairs: list = []
    acc = {"waiting_ms": 0.0, "step_host_ms": 0.0}
    main_start_ns = time.monotonic_ns()
    t0 = time.perf_counter()
    la = _ev()
    for _ in range(steps):
        p = time.perf_counter()
        batch = next_batch(it)
        q = time.perf_counter()
        acc["waiting_ms"] += (q - p) * 1e3
        torch.cuda.nvtx.range_push("step")
        train_step(batch, w, a, args.matmuls, args.pinned, copy_pairs, pairs)
        torch.cuda.nvtx.range_pop()
        acc["step_host_ms"] += (time.perf_counter() - q) * 1e3
    lb = _ev()
    torch.cuda.synchronize()
    host_ms = (time.perf_counter() - t0) * 1e3
    main_end_ns = time.monotonic_ns()
    wall_ms = la.elapsed_time(lb)
    busy = sum(x.elapsed_time(y) for x, y in pairs)
    copy_ms = sum(x.elapsed_time(y) for x, y in copy_pairs)
    nbytes = bs * 3 * args.side * args.side * 4
    return {
        "wall_ms": round(wall_ms, 3),
        "wall_source": "loop_events",
        "host_wall_ms": round(host_ms, 3),
        "gpu_busy_ms": round(busy, 3),
        "busy_source": "event pair around each step's copy + compute (includes launch gaps)",
        "busy_includes": "kernels+copies",
        "copy_ms": round(copy_ms, 3),
        "copy_share": round(copy_ms / wall_ms, 4),
        "achieved_gb_s": round(nbytes * steps / (copy_ms / 1e3) / 1e9, 2) if copy_ms else None,
        "bytes_copied_per_step": nbytes,
        "workers": args.workers,
        "pinned": args.pinned,
        "item_ms": args.item_ms,
        "batch": bs,
        "side": args.side,
        "matmuls_per_step": args.matmuls,
        "steps": steps,
        "host": {k: round(v, 3) for k, v in acc.items()},
        "host_share": {k: round(v / host_ms, 4) for k, v in acc.items()},
        "host_functions": {"waiting": "next_batch", "worker": "make_sample", "step": "train_step"},
        "main_start_ns": main_start_ns,
        "main_end_ns": main_end_ns,
    }


def _line_of(marker: str) -> int:
    with open(__file__) as f:
        for n, line in enumerate(f, 1):
            if marker in line and "_line_of" not in line:
                return n
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", required=True, choices=MODES)
    p.add_argument("--name", default="", help="the shape's name in the truth line")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--seconds", type=float, default=6.0, help="serve: how long traffic lasts")
    p.add_argument("--gap-ms", type=float, default=30.0, help="serve: mean gap between requests")
    p.add_argument("--words", type=int, default=400, help="serve: words per request")
    p.add_argument("--copy-mb", type=int, default=64, help="copyonly: MiB per copy")
    p.add_argument("--workers", type=int, default=4, help="loader: DataLoader workers")
    p.add_argument("--pinned", action="store_true", help="loader: pin_memory=True")
    p.add_argument("--item-ms", type=float, default=1.0, help="loader: Python ms per sample")
    p.add_argument("--side", type=int, default=64, help="loader: image side (3 x side x side)")
    p.add_argument("--batch", type=int, default=32, help="loader: batch size")
    p.add_argument("--matmuls", type=int, default=1, help="loader: 8192^2 matmuls per step")
    args = p.parse_args()
    t_main = time.monotonic_ns()
    if not torch.cuda.is_available():
        print("gpu_shapes: no CUDA device", file=sys.stderr)
        return 2
    t_warm = time.monotonic_ns()
    truth = {"serve": serve, "copyonly": copyonly, "loader": loader}[args.mode](args)
    wall, busy = truth["wall_ms"], min(truth["gpu_busy_ms"], truth["wall_ms"])
    truth.update(
        mode=args.name or args.mode,
        workload=args.mode,
        idle_ratio=round(1.0 - busy / wall, 4) if wall > 0 else None,
        warmup_start_ns=t_warm,
        torch_imported_ns=t_main,
        pid=os.getpid(),
        torch=torch.__version__,
        device=torch.cuda.get_device_name(),
        argv=sys.argv[1:],
    )
    print("KUBEPROF_TRUTH " + json.dumps(truth, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
