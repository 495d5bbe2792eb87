"""GPU tracing overhead: launch-bound, compute-bound, training and batch-1 decode loops.

Each mode runs in its own process; inside it, baseline and profiled repetitions alternate
(ABAB, BABA, ...) so drift between processes (±20 % on the H200) cancels out. The profiled
repetition is timed inside the profiler's session (start/stop costs excluded, for kubeprof
and torch.profiler alike).

    python bench/gpu_overhead.py --reps 10 --out results.json     # parent: all modes
    python bench/gpu_overhead.py --breakdown --out breakdown.json # per-kind / per-callback
    modes: kubeprof (call-site stacks, the default; the C launch hook when built; backward
           kernels charged to their forward op through autograd sequence numbers),
           kubeprof_pyhook (the same with the pure-Python launch callback),
           kubeprof_apiframes (the C hook keying call sites through frame objects),
           kubeprof_nobackward (the same without:
           backward kernels under the main thread's stack), kubeprof_full (walk every launch),
           kubeprof_nostack (callbacks, no stack), kubeprof_activity (records only),
           kineto (torch.profiler CPU+CUDA), kineto_stack (with_stack=True)

``--cpus 2,3,4,5`` pins each child (all its threads) to those CPUs. Decode is also measured
as 40 pairs of 128-token chunks (``KUBEPROF_BENCH_PAIR_TOKENS``), untraced and traced
strictly alternating (``KUBEPROF_BENCH_PAIRS``, default 40), each traced chunk against its
two untraced neighbours (the median of those pairs), because the host's speed jumps between
two levels for seconds at a time; and 8 tokens twice right after each enable (the first pays
what switching on costs at each kernel's first launch, the second does not). Each traced
chunk ends with a forced hand-over of its records, once per 128 tokens, which a recording
never does; so decode is also measured as 16 pairs of recording-length stretches
(``KUBEPROF_BENCH_STRETCH_PAIRS``; 4 chunks each, ``KUBEPROF_BENCH_STRETCH_CHUNKS``) during
which CUPTI's periodic delivery and the sender thread run as in a recording, with one
hand-over at the end, inside the timing.

The decode loop is an autoregressive batch-1 generation with a small transformer (6 blocks,
d=512, KV cache, greedy, no CUDA graphs): ~100 short kernels a token, reported as tokens/s.
``--breakdown`` runs, in one process per launch hook (C, Python), the launch-bound loop
under each activity kind alone and with the callbacks alone (and, for the Python hook, one
callback domain at a time), interleaved with the untraced loop.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OPS = 20_000  # launch-bound ops per repetition
MATMULS = 50
TRAIN_STEPS = 100  # launch-bound training steps (small MLP, forward + backward) per repetition
DECODE_TOKENS = 128  # tokens generated per repetition (batch 1, after a 16-token prompt)
SHORT_TOKENS = 8  # the few tokens timed right after the profiler is switched on
PAIR_TOKENS = int(os.environ.get("KUBEPROF_BENCH_PAIR_TOKENS", "128"))  # tokens a chunk
PAIRS = int(os.environ.get("KUBEPROF_BENCH_PAIRS", "40"))  # chunk pairs a run
# Recording-length stretches: chunks back to back while the tracer stays on, so CUPTI's
# periodic buffer delivery and the sender thread run inside the timing as in a recording,
# and the hand-over at the end is paid once per stretch, not once per chunk.
STRETCH_CHUNKS = int(os.environ.get("KUBEPROF_BENCH_STRETCH_CHUNKS", "4"))
STRETCH_PAIRS = int(os.environ.get("KUBEPROF_BENCH_STRETCH_PAIRS", "16"))
MODES = {
    "kubeprof": {"KUBEPROF_GPU_STACKS": "callsite"},
    "kubeprof_pyhook": {"KUBEPROF_GPU_STACKS": "callsite", "KUBEPROF_GPU_HOOK": "python"},
    # the C hook keyed through the frame API (frame objects), not the frames in place
    "kubeprof_apiframes": {"KUBEPROF_GPU_STACKS": "callsite", "KUBEPROF_GPU_FRAMES": "api"},
    # decode only: untraced, frames in place and frame API chunks in one process (decode_ab)
    "kubeprof_ab": {"KUBEPROF_GPU_STACKS": "callsite"},
    "kubeprof_nobackward": {"KUBEPROF_GPU_STACKS": "callsite", "KUBEPROF_GPU_BACKWARD": "0"},
    "kubeprof_full": {"KUBEPROF_GPU_STACKS": "full"},
    "kubeprof_nostack": {"KUBEPROF_GPU_STACKS": "off"},
    "kubeprof_activity": {"KUBEPROF_GPU_CALLBACKS": "0"},
    "kineto": {},
    "kineto_stack": {},
}
NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


# ---------------------------------------------------------------- child
def decoder(torch: object) -> object:
    """A small GPT-style decoder with a KV cache; returns ``generate(n_tokens)``."""
    import torch.nn.functional as F
    from torch import nn

    torch_ = torch  # type: ignore[assignment]
    d, heads, layers, vocab, ctx = 512, 8, 6, 8192, 512
    dev, dt = "cuda", torch_.bfloat16  # type: ignore[attr-defined]

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: object, kc: object, vc: object, pos: int) -> object:
            b, t, _ = x.shape  # type: ignore[attr-defined]
            q, k, v = self.qkv(self.ln1(x)).split(d, -1)
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            kc[:, :, pos : pos + t] = k  # type: ignore[index]
            vc[:, :, pos : pos + t] = v  # type: ignore[index]
            att = F.scaled_dot_product_attention(
                q,
                kc[:, :, : pos + t],
                vc[:, :, : pos + t],
                is_causal=t > 1,  # type: ignore[index]
            )
            x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    class Gpt(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, ids: object, caches: list, pos: int) -> object:
            x = self.emb(ids)
            for blk, (kc, vc) in zip(self.blocks, caches, strict=True):
                x = blk(x, kc, vc, pos)
            return self.head(self.ln(x[:, -1:]))

    model = Gpt().to(dev, dt).eval()
    shape = (1, heads, ctx, d // heads)
    caches = [
        (torch_.empty(shape, device=dev, dtype=dt), torch_.empty(shape, device=dev, dtype=dt))  # type: ignore[attr-defined]
        for _ in range(layers)
    ]
    prompt = torch_.randint(0, vocab, (1, 16), device=dev)  # type: ignore[attr-defined]

    def generate(n: int) -> None:
        with torch_.inference_mode():  # type: ignore[attr-defined]
            logits = model(prompt, caches, 0)
            pos = prompt.shape[1]
            for _ in range(n):
                tok = logits[:, -1].argmax(-1, keepdim=True)
                logits = model(tok, caches, pos)
                pos += 1
        torch_.cuda.synchronize()  # type: ignore[attr-defined]

    return generate


def child(
    mode: str, reps: int, matmul_n: int, cpus: str = "", breakdown_loop: str = "launch"
) -> dict:
    if cpus:  # before torch starts its threads, so all of them inherit it
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    import torch

    x = torch.ones(256, device="cuda")
    a = torch.randn(matmul_n, matmul_n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)

    def launch_bound() -> None:
        for _ in range(OPS // 2):
            x.add_(1.0)
            x.mul_(0.5)
        torch.cuda.synchronize()

    def compute_bound() -> None:
        for _ in range(MATMULS):
            torch.matmul(a, a, out=c)
        torch.cuda.synchronize()

    mlp = torch.nn.Sequential(
        *[m for _ in range(4) for m in (torch.nn.Linear(256, 256), torch.nn.GELU())]
    ).cuda()
    xb = torch.randn(32, 256, device="cuda")

    def train_bound() -> None:
        """Launch-bound training: half its kernels come from autograd's engine thread."""
        for _ in range(TRAIN_STEPS):
            mlp(xb).square().mean().backward()
        torch.cuda.synchronize()

    generate = decoder(torch)

    def decode() -> None:
        """Batch-1 autoregressive decode: ~100 short kernels per token."""
        generate(DECODE_TOKENS)  # type: ignore[operator]

    def short() -> None:
        """A few tokens: the first/second probe after an enable."""
        generate(SHORT_TOKENS)  # type: ignore[operator]

    def chunk() -> None:
        """One element of the paired decode measurement."""
        generate(PAIR_TOKENS)  # type: ignore[operator]

    def stretch() -> None:
        """One element of the recording-length pairs: several chunks under one enable."""
        for _ in range(STRETCH_CHUNKS):
            generate(PAIR_TOKENS)  # type: ignore[operator]

    tracer = None
    if mode.startswith("kubeprof") or mode == "breakdown":
        from kubeprof.agent.gpu import inject

        tracer = inject._tracer
        if tracer is None:
            raise SystemExit("kubeprof tracer not loaded (run through the parent)")

    stop_costs: dict[str, list[float]] = {
        "launch_bound": [],
        "compute_bound": [],
        "train_bound": [],
        "decode": [],
    }

    def profiled(fn: object, split: list[float] | None = None) -> float:
        """Time of ``fn`` while profiled, including the tracer's own record processing;
        ``split`` gets the time of ``fn`` alone (before the flush and hand-over)."""
        if tracer is not None:
            tracer.resume()
            t0 = time.perf_counter()
            fn()
            if split is not None:
                split.append(time.perf_counter() - t0)
            # hand every record to our converter and the wire now, inside the timing, so
            # none of this work leaks into the next (baseline) repetition
            tracer.flush()
            tracer.sender.drain_and_send()
            dt = time.perf_counter() - t0
            tracer.pause()
            return dt
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        prof = profile(activities=acts, with_stack=mode == "kineto_stack")
        prof.__enter__()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        t1 = time.perf_counter()
        prof.__exit__(None, None, None)  # Kineto's post-processing, reported apart
        stop = time.perf_counter() - t1
        stop_costs.setdefault(fn.__name__, []).append(stop)  # type: ignore[attr-defined]
        return dt

    def plain(fn: object) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    if tracer is not None:
        tracer.pause()
    for _ in range(2):  # warm-up: allocator, cuBLAS heuristics, profiler first-use costs
        plain(launch_bound)
        plain(compute_bound)
        plain(train_bound)
        plain(decode)
        profiled(launch_bound)
        profiled(compute_bound)
        profiled(train_bound)
        profiled(decode)
    if mode == "kubeprof_ab":
        return {"mode": mode, "hook": "c", **decode_ab(plain, profiled, chunk, tracer)}
    if mode == "breakdown":
        if breakdown_loop == "decode":
            return breakdown(tracer, reps, decode, plain, profiled, unit=DECODE_TOKENS)
        return breakdown(tracer, reps, launch_bound, plain, profiled)
    res: dict[str, list[float]] = {
        "base_launch": [],
        "prof_launch": [],
        "base_compute": [],
        "prof_compute": [],
        "base_train": [],
        "prof_train": [],
        "base_decode": [],
        "prof_decode": [],
        "base_short": [],
        "prof_short_first": [],
        "prof_short_second": [],
    }

    def first_and_second() -> None:
        """The same few tokens twice per enable: the first pays what switching the
        profiler on costs at each kernel's first launch after it, the second does not."""
        if tracer is not None:
            tracer.resume()
            res["prof_short_first"].append(plain(short))
            res["prof_short_second"].append(plain(short))
            tracer.flush()
            tracer.sender.drain_and_send()
            tracer.pause()

    for r in range(reps):
        order = ("base", "prof") if r % 2 == 0 else ("prof", "base")
        for which in order:
            run = plain if which == "base" else profiled
            res[f"{which}_launch"].append(run(launch_bound))
            res[f"{which}_compute"].append(run(compute_bound))
            res[f"{which}_train"].append(run(train_bound))
            res[f"{which}_decode"].append(run(decode))
            if which == "base":
                res["base_short"].append(plain(short))
            else:
                first_and_second()
    res.update(decode_pairs(plain, profiled, chunk))
    if STRETCH_PAIRS:
        res.update(decode_pairs(plain, profiled, stretch, STRETCH_PAIRS, prefix="stretch"))
    if tracer is not None:
        tracer.resume()
    profiled_reps = reps + 2
    return {
        "mode": mode,
        "hook": ("c" if tracer._hook is not None else "python") if tracer is not None else None,
        "frames": tracer.sender.hello.get("frames") if tracer is not None else None,
        **res,
        "stop_s": stop_costs,
        "expected_launch_kernels": profiled_reps * OPS,
        "expected_matmul_launches": profiled_reps * MATMULS,
        "tflops": 2 * matmul_n**3 * MATMULS / statistics.median(res["base_compute"]) / 1e12,
    }


def decode_pairs(
    plain: object, profiled: object, chunk: object, pairs: int = PAIRS, prefix: str = "pair"
) -> dict[str, list[float]]:
    """Short untraced and traced decode chunks strictly alternating (B P B P ... B).

    The host's speed jumps between two levels for seconds at a time (0.24 or 0.35-0.44 s
    for the same 128 tokens, traced or not, pinned or not); each traced chunk is compared
    with the untraced chunks on either side of it, so a jump moves at most one pair."""
    base: list[float] = [plain(chunk)]  # type: ignore[operator]
    prof: list[float] = []
    unflushed: list[float] = []  # the traced chunk before its records are handed over
    for _ in range(pairs):
        prof.append(profiled(chunk, unflushed))  # type: ignore[operator]
        base.append(plain(chunk))  # type: ignore[operator]
    return {f"{prefix}_base": base, f"{prefix}_prof": prof, f"{prefix}_prof_unflushed": unflushed}


def decode_ab(plain: object, profiled: object, chunk: object, tracer: object) -> dict:
    """The C hook's two ways to key a launch, in one process: B R B A B R B A ... B, R a
    chunk traced with keys read from the interpreter frames in place, A through the frame
    API (frame_keys), B untraced; each traced chunk against its two untraced neighbours.
    Both kinds of keys share the call-site table, so after the warm-up neither walks."""
    from kubeprof.agent.gpu import frame_keys

    hook = tracer._hook  # type: ignore[attr-defined]
    out: dict[str, list[float]] = {
        k: [] for k in ("ab_base", "ab_raw", "ab_api", "ab_raw_unflushed", "ab_api_unflushed")
    }
    out["ab_base"].append(plain(chunk))  # type: ignore[operator]
    for _ in range(PAIRS):
        for kind, mode in (("raw", "auto"), ("api", "api")):
            assert frame_keys.use(hook, mode) == kind
            out[f"ab_{kind}"].append(profiled(chunk, out[f"ab_{kind}_unflushed"]))  # type: ignore[operator]
            out["ab_base"].append(plain(chunk))  # type: ignore[operator]
    frame_keys.use(hook, "auto")
    return out


def ab_losses(r: dict) -> dict[str, float]:
    """decode_ab's paired losses (%), by kind, with and without the hand-over."""
    base = r["ab_base"]  # B R B A B ...: R number i between base[2i], base[2i + 1]; A one on
    kinds = {"raw": 0, "api": 1}
    out = {}
    for kind, first in kinds.items():
        for suffix in ("", "_unflushed"):
            traced = r[f"ab_{kind}{suffix}"]
            ratios = [
                1 - (base[2 * i + first] + base[2 * i + first + 1]) / 2 / t
                for i, t in enumerate(traced)
            ]
            out[f"{kind}{suffix}"] = 100 * statistics.median(ratios)
    return out


def paired_loss(r: dict, key: str = "pair_prof") -> float:
    """Median over the pairs of the tokens/s lost: each traced chunk against the mean of
    its two untraced neighbours (``key``'s prefix names the series: pair, stretch)."""
    b, p = r[key.split("_", 1)[0] + "_base"], r[key]
    return statistics.median(100 * (1 - (b[i] + b[i + 1]) / 2 / t) for i, t in enumerate(p))


def breakdown(
    tracer: object,
    reps: int,
    loop: object,
    plain: object,
    profiled: object,
    unit: int = OPS,
) -> dict:
    """A loop (launch-bound, or decode) under each activity kind alone, callbacks alone, ...;
    the tracer is reconfigured while paused, variants interleaved with the untraced loop.
    ``unit``: the loop's ops (or tokens), for the added time per op."""
    from dataclasses import replace

    tr: object = tracer
    base_cfg = tr.config  # type: ignore[attr-defined]
    all_cbids = list(tr._cbids)  # type: ignore[attr-defined]
    python_hook = tr._hook is None  # type: ignore[attr-defined]
    nothing: tuple[str, ...] = ()
    variants: dict[str, tuple[dict, int]] = {
        "activity kernel": ({"callbacks": False, "kinds": ("kernel",)}, 0),
        "activity memcpy": ({"callbacks": False, "kinds": ("memcpy",)}, 0),
        "activity memset": ({"callbacks": False, "kinds": ("memset",)}, 0),
        "activity sync": ({"callbacks": False, "kinds": ("sync",)}, 0),
        "activity nvtx": ({"callbacks": False, "kinds": ("nvtx",)}, 0),
        "activity all 5 kinds": ({"callbacks": False}, 0),
        "callbacks, no activity": ({"kinds": nothing}, 0),
        "callbacks, no stack, no activity": ({"kinds": nothing, "stacks": "off"}, 0),
        "callbacks + kernel": ({"kinds": ("kernel",)}, 0),
        "default (callbacks + 5 kinds)": ({}, 0),
    }
    if python_hook:
        variants["callbacks runtime domain only, no activity"] = ({"kinds": nothing}, 2)
        variants["callbacks driver domain only, no activity"] = ({"kinds": nothing}, 1)
    res: dict[str, list[float]] = {"base": [], **{k: [] for k in variants}}
    tr.pause()  # type: ignore[attr-defined]
    names = list(variants)
    for r in range(reps):
        res["base"].append(plain(loop))  # type: ignore[operator]
        for name in names if r % 2 == 0 else reversed(names):
            changes, domain = variants[name]
            tr.config = replace(base_cfg, **changes)  # type: ignore[attr-defined]
            tr.stacks.mode = tr.config.stacks  # type: ignore[attr-defined]
            if python_hook:
                tr._cbids = [c for c in all_cbids if not domain or c[0] == domain]  # type: ignore[attr-defined]
            res[name].append(profiled(loop))  # type: ignore[operator]
        res["base"].append(plain(loop))  # type: ignore[operator]
    tr.config = base_cfg  # type: ignore[attr-defined]
    tr.stacks.mode = base_cfg.stacks  # type: ignore[attr-defined]
    tr._cbids = all_cbids  # type: ignore[attr-defined]
    base = statistics.median(res["base"])
    return {
        "mode": "breakdown",
        "loop": "decode" if unit != OPS else "launch",
        "hook": "python" if python_hook else "c",
        "base_s": base,
        "rows": {
            k: {
                "median_s": statistics.median(v),
                "slowdown": statistics.median(v) / base,
                "added_us_per_op": (statistics.median(v) - base) / unit * 1e6,
                "loss_pct": 100 * (1 - base / statistics.median(v)),
            }
            for k, v in res.items()
            if k != "base"
        },
        "raw": res,
    }


# ---------------------------------------------------------------- parent
def run_mode(
    mode: str, reps: int, matmul_n: int, cpus: str = "", breakdown_loop: str = "launch"
) -> dict:
    sys.path[:0] = [str(REPO / "src"), str(REPO / "agent")]
    from kubeprof.agent.gpu.inject import tracer_env
    from kubeprof.agent.gpu.receiver import GpuReceiver

    argv = [
        sys.executable,
        __file__,
        "--child",
        mode,
        "--reps",
        str(reps),
        "--matmul-n",
        str(matmul_n),
        "--cpus",
        cpus,
        "--breakdown-loop",
        breakdown_loop,
    ]
    env = {
        **os.environ,
        **NO_MULTICAST,
        "PYTHONPATH": os.pathsep.join(
            [str(REPO / "src"), str(REPO / "agent"), os.environ.get("PYTHONPATH", "")]
        ),
    }
    rx = None
    if mode.startswith("breakdown"):  # breakdown_c / breakdown_python: one launch hook each
        argv[3] = "breakdown"
        env["KUBEPROF_GPU_HOOK"] = mode.split("_", 1)[1]
    if mode.startswith(("kubeprof", "breakdown")):
        sock = os.path.join(tempfile.mkdtemp(prefix="kpbench-"), "gpu.sock")
        rx = GpuReceiver(sock)
        rx.start()
        env.update(tracer_env(sock, base=env))
        env.update(MODES.get(mode, {}))
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    kernels = attributed = launch_kernels = launch_attr = backward = via_main = 0
    counters: dict[str, int] = {}

    def take(batch: object) -> None:
        nonlocal kernels, attributed, launch_kernels, launch_attr, backward, via_main
        for a in batch.gpu_activities:  # type: ignore[attr-defined]
            if a.kind != "kernel":
                continue
            kernels += 1
            has = any(f.kind.value == "python" for f in a.stack)
            attributed += has
            marker = a.stack[-2].name if len(a.stack) > 1 else ""
            backward += marker.startswith("backward of ")
            via_main += marker.startswith("[launched by a native thread")
            if "elementwise" in a.name:
                launch_kernels += 1
                launch_attr += any(f.name.endswith("launch_bound") for f in a.stack)
        for k, v in batch.counters.items():  # type: ignore[attr-defined]
            counters[k] = counters.get(k, 0) + v

    while proc.poll() is None:
        if rx:
            take(rx.poll())
        time.sleep(0.2)
    out, err = proc.communicate()
    if rx:
        take(rx.stop())
    if proc.returncode != 0:
        return {"mode": mode, "error": err[-2000:]}
    res = json.loads(out.strip().splitlines()[-1])
    res["wall_s"] = time.perf_counter() - t0
    if rx:
        res.update(
            kernels=kernels,
            attributed_kernels=attributed,
            elementwise_kernels=launch_kernels,
            elementwise_in_launch_bound=launch_attr,
            backward_kernels=backward,
            via_main_kernels=via_main,
            counters=counters,
        )
    return res


def summarise(r: dict) -> dict:
    med = {
        k: statistics.median(r[k])
        for k in ("base_launch", "prof_launch", "base_compute", "prof_compute")
    }
    train = {k: statistics.median(r[k]) for k in ("base_train", "prof_train") if r.get(k)}
    dec = {k: statistics.median(r[k]) for k in ("base_decode", "prof_decode") if r.get(k)}
    more = {
        k: statistics.median(r[k])
        for k in (
            "base_short",
            "prof_short_first",
            "prof_short_second",
        )
        if r.get(k)
    }
    return {
        "mode": r["mode"],
        "hook": r.get("hook"),
        "frames": r.get("frames"),
        "decode_tokens_per_s_base": DECODE_TOKENS / dec["base_decode"] if dec else None,
        "decode_tokens_per_s_traced": DECODE_TOKENS / dec["prof_decode"] if dec else None,
        "decode_loss_pct": 100 * (1 - dec["base_decode"] / dec["prof_decode"]) if dec else None,
        "decode_loss_paired_pct": paired_loss(r) if r.get("pair_base") else None,
        "decode_loss_paired_unflushed_pct": (
            paired_loss(r, "pair_prof_unflushed") if r.get("pair_prof_unflushed") else None
        ),
        "decode_pairs": len(r.get("pair_prof") or ()),
        "decode_pair_tokens": PAIR_TOKENS,
        "decode_loss_stretch_pct": paired_loss(r, "stretch_prof")
        if r.get("stretch_prof")
        else None,
        "decode_loss_stretch_unflushed_pct": (
            paired_loss(r, "stretch_prof_unflushed") if r.get("stretch_prof_unflushed") else None
        ),
        "decode_stretches": len(r.get("stretch_prof") or ()),
        "decode_stretch_tokens": STRETCH_CHUNKS * PAIR_TOKENS,
        "short_tokens": SHORT_TOKENS,
        "short_base_s": more.get("base_short"),
        "short_first_after_enable_s": more.get("prof_short_first"),
        "short_second_after_enable_s": more.get("prof_short_second"),
        "launch_base_s": med["base_launch"],
        "launch_prof_s": med["prof_launch"],
        "launch_slowdown": med["prof_launch"] / med["base_launch"],
        "added_us_per_op": (med["prof_launch"] - med["base_launch"]) / OPS * 1e6,
        "compute_slowdown": med["prof_compute"] / med["base_compute"],
        "train_base_s": train.get("base_train"),
        "train_slowdown": train["prof_train"] / train["base_train"] if train else None,
        "backward_kernels": r.get("backward_kernels"),
        "via_main_kernels": r.get("via_main_kernels"),
        "tflops": r.get("tflops"),
        "kineto_stop_s_launch_median": (
            statistics.median(r["stop_s"]["launch_bound"]) if r["stop_s"]["launch_bound"] else None
        ),
        "launch_kernels_expected": r["expected_launch_kernels"],
        "kernels": r.get("kernels"),
        "elementwise_kernels": r.get("elementwise_kernels"),
        "elementwise_with_launch_bound_frame": r.get("elementwise_in_launch_bound"),
        "attributed_kernels": r.get("attributed_kernels"),
        "dropped": (r.get("counters") or {}).get("gpu_dropped", 0),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", default="")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--matmul-n", type=int, default=8192)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--out", default="")
    p.add_argument(
        "--breakdown", action="store_true", help="per-kind / per-callback costs, per hook"
    )
    p.add_argument("--hooks", default="c,python", help="launch hooks for --breakdown")
    p.add_argument("--cpus", default="", help="pin each child to these CPUs, e.g. 2,3")
    p.add_argument(
        "--breakdown-loop",
        default="launch",
        choices=("launch", "decode"),
        help="the loop --breakdown measures (decode: added time per token)",
    )
    args = p.parse_args()
    if args.child:
        res = child(args.child, args.reps, args.matmul_n, args.cpus, args.breakdown_loop)
        print(json.dumps(res), flush=True)
        return
    rows, raw = [], []
    hooks = args.hooks.split(",")
    modes = [f"breakdown_{h}" for h in hooks] if args.breakdown else args.modes.split(",")
    for mode in modes:
        r = run_mode(mode, args.reps, args.matmul_n, args.cpus, args.breakdown_loop)
        raw.append(r)
        if "error" in r:
            print(f"{mode}: FAILED\n{r['error']}", flush=True)
            continue
        if r["mode"] == "kubeprof_ab":
            losses = ab_losses(r)
            print(json.dumps({"mode": r["mode"], "pairs": len(r["ab_raw"]), **losses}))
            print(
                f"\nkubeprof_ab: decode loss, paired {PAIR_TOKENS}-token chunks, "
                f"{len(r['ab_raw'])} each: frames in place {losses['raw']:.1f} % "
                f"({losses['raw_unflushed']:.1f} % before hand-over), frame API "
                f"{losses['api']:.1f} % ({losses['api_unflushed']:.1f} %)",
                flush=True,
            )
            continue
        if r["mode"] == "breakdown":
            unit = f"{DECODE_TOKENS} tokens" if r.get("loop") == "decode" else f"{OPS:,} ops"
            print(f"\n{mode} (hook {r['hook']}), base {r['base_s']:.3f} s / {unit}")
            print("| variant | slowdown | loss | added µs/op |\n| --- | ---: | ---: | ---: |")
            for name, row in r["rows"].items():
                print(
                    f"| {name} | {row['slowdown']:.2f}× | {row['loss_pct']:.1f} % "
                    f"| {row['added_us_per_op']:.2f} |"
                )
            continue
        s = summarise(r)
        rows.append(s)
        print(json.dumps(s), flush=True)
    print(
        "\n| mode | launch-bound slowdown | added µs/op | compute-bound slowdown "
        "| training-step slowdown | decode tokens/s untraced → traced (loss) "
        "| decode loss, paired chunks (before hand-over) "
        "| decode loss, recording-length stretches (before hand-over) | kernels seen / launched |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in rows:
        seen = "-"
        if s["kernels"]:
            seen = f"{s['elementwise_kernels']:,} / {s['launch_kernels_expected']:,}"
        print(
            f"| {s['mode']} | {s['launch_slowdown']:.2f}× | {s['added_us_per_op']:.2f} "
            f"| {s['compute_slowdown']:.3f}× | {s['train_slowdown'] or 0:.2f}× "
            f"| {s['decode_tokens_per_s_base'] or 0:.0f} → "
            f"{s['decode_tokens_per_s_traced'] or 0:.0f}"
            f" ({s['decode_loss_pct'] or 0:.1f} %) | {s['decode_loss_paired_pct'] or 0:.1f} %"
            f" ({s['decode_loss_paired_unflushed_pct'] or 0:.1f} %) of {s['decode_pairs']}"
            f" | {s['decode_loss_stretch_pct'] or 0:.1f} %"
            f" ({s['decode_loss_stretch_unflushed_pct'] or 0:.1f} %) of {s['decode_stretches']}"
            f" × {s['decode_stretch_tokens']} tokens | {seen} |"
        )
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": rows, "raw": raw}, indent=1))


if __name__ == "__main__":
    main()
