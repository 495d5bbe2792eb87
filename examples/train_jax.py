"""An MLP classifier (bf16) trained with JAX on random data: a realistic JAX loop to profile.

The input pipeline can be made slow (``--slow-ms`` or KUBEPROF_EXAMPLE_SLOW_MS: extra
milliseconds of CPU work per batch) to leave the GPU idle between steps.

    python examples/train_jax.py --steps 300
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from collections.abc import Iterator

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU politely

import jax
import jax.numpy as jnp
import numpy as np


def batches(
    steps: int, batch: int, dim: int, classes: int, slow_ms: float
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Random features and labels from a small pre-made pool; ``slow_ms`` of CPU time per
    batch stands for decoding and augmentation."""
    rng = np.random.default_rng(0)
    pool = [
        (rng.standard_normal((batch, dim), dtype=np.float32), rng.integers(0, classes, (batch,)))
        for _ in range(4)
    ]
    for step in range(steps):
        if slow_ms:
            time.sleep(slow_ms / 1000.0)
        yield pool[step % len(pool)]


def init(key: jax.Array, sizes: list[int]) -> list[tuple[jax.Array, jax.Array]]:
    params = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        key, sub = jax.random.split(key)
        w = jax.random.normal(sub, (fan_in, fan_out)) / jnp.sqrt(fan_in)
        params.append((w.astype(jnp.bfloat16), jnp.zeros(fan_out, jnp.bfloat16)))
    return params


def forward(params: list[tuple[jax.Array, jax.Array]], x: jax.Array) -> jax.Array:
    for w, b in params[:-1]:
        x = jax.nn.gelu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss_fn(params: list[tuple[jax.Array, jax.Array]], x: jax.Array, y: jax.Array) -> jax.Array:
    logits = forward(params, x.astype(jnp.bfloat16)).astype(jnp.float32)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


@jax.jit
def train_step(params: list, x: jax.Array, y: jax.Array) -> tuple[list, jax.Array]:
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params = jax.tree_util.tree_map(lambda p, g: (p - 1e-2 * g).astype(p.dtype), params, grads)
    return params, loss


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=8192)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--layers", type=int, default=3, help="hidden layers")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument(
        "--slow-ms", type=float, default=float(os.environ.get("KUBEPROF_EXAMPLE_SLOW_MS", "0"))
    )
    args = p.parse_args()
    print("devices:", jax.devices())
    sizes = [args.dim, *[args.hidden] * args.layers, args.classes]
    params = init(jax.random.PRNGKey(0), sizes)
    t0 = time.perf_counter()
    for step, (x, y) in enumerate(
        batches(args.steps, args.batch, args.dim, args.classes, args.slow_ms)
    ):
        params, loss = train_step(params, jnp.asarray(x), jnp.asarray(y))
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step} loss {float(loss):.3f}", flush=True)
    jax.block_until_ready(params)
    dt = time.perf_counter() - t0
    print(
        f"{args.steps} steps in {dt:.2f} s ({args.steps / dt:.1f} steps/s, slow_ms={args.slow_ms})"
    )


if __name__ == "__main__":
    main()
