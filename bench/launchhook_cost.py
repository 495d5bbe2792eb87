"""What the C launch hook costs per launch on the CPU, this tree's against another commit's.

Usage: .venv/bin/python bench/launchhook_cost.py [--base main] [--launches 20000] [--reps 41]
       [--depth 20] [--fresh 3]

Both hooks are built from source (scripts/build_launchhook.sh, LAUNCHHOOK_SRC) and driven
through tests/unit/gpu/fake_libcupti.c, which calls the subscriber as libcupti does at a
runtime launch: runtime enter (stack lookup, launch row), nested driver enter and exit,
runtime exit. Each hook runs in its own process, callbacks on and off in turn (ABAB), and the
cost is the on-off difference of the thread's CPU time per launch, median of the reps: the
ctypes calls that stand in for CUDA cancel out. The processes alternate, base first,
``--rounds`` times. Each launch comes from ``--depth`` Python frames, the innermost
``--fresh`` of them new at every launch, as a module call's are in a decode step; this
tree's hook runs twice, keyed through the frame API and from the interpreter frames in
place (frame_keys; 3.11+).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOOK_SRC = "agent/kubeprof/agent/gpu/_launchhook.c"

CHILD = r"""
import ctypes, json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import _launchhook as hook
depth, fresh, offsets = int(sys.argv[5]), int(sys.argv[6]), json.loads(sys.argv[7])
lib = ctypes.CDLL(sys.argv[2], mode=ctypes.RTLD_GLOBAL)
n, reps = int(sys.argv[3]), int(sys.argv[4])
api = lib.fake_api
api.argtypes = [ctypes.c_int, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint32, ctypes.c_char_p]
rc = hook.install(libcupti=sys.argv[2], cbids=[(2, 211), (1, 307)], alias=[],
                  walk=lambda f: 1, slow=lambda *a: (0, 0, -1), intern=lambda s: 1,
                  resolve_peek=None, max_queued=1 << 30)
assert rc == 0, rc
if offsets:
    assert hook.raw_frames(tuple(offsets)), "frame offsets refused"
name = b"cudaLaunchKernel"

def one(corr):
    api(2, 211, 0, corr, name)
    api(1, 307, 0, corr + 1, name)
    api(1, 307, 1, corr + 1, name)
    api(2, 211, 1, corr, name)

def wrap(inner):
    return lambda corr: inner(corr)

launch = one
for _ in range(fresh):  # each a new frame at every launch
    launch = wrap(launch)

def loop():
    t = time.thread_time_ns()  # CPU time of this thread: not the waits for a shared core
    for corr in range(1, 2 * n, 2):
        launch(corr)
    return time.thread_time_ns() - t

def nest(d):
    return nest(d - 1) if d > 0 else measure()

def measure():
    added = []
    for _ in range(reps):
        hook.enable(False)
        off = loop()
        hook.enable(True)
        on = loop()
        blob, rows = hook.take("launch", 1 << 30)
        assert rows == n, rows
        added.append((on - off) / n)
    return added, blob, rows

added, blob, rows = nest(max(depth - fresh - 5, 0))  # 5: module, nest, measure, loop, one
hook.enable(False)
hook.uninstall()
print(json.dumps({"ns_per_launch": statistics.median(added), "reps": added,
                  "row_bytes": len(blob) // rows}))
"""


def build(tmp: Path, label: str, source: str) -> Path:
    """The hook built from ``source`` (C text) into tmp/label/."""
    out = tmp / label
    out.mkdir()
    src = out / "_launchhook.c"
    src.write_text(source)
    env = {**os.environ, "LAUNCHHOOK_SRC": str(src)}
    subprocess.run(
        ["bash", str(ROOT / "scripts/build_launchhook.sh"), sys.executable, str(out)],
        check=True,
        env=env,
        capture_output=True,
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="main", help="commit whose hook is the baseline")
    ap.add_argument("--launches", type=int, default=20_000, help="per block")
    ap.add_argument("--reps", type=int, default=41, help="on/off block pairs per process")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--depth", type=int, default=20, help="Python frames at each launch")
    ap.add_argument("--fresh", type=int, default=3, help="of them new at each launch")
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT / "agent"), str(ROOT / "src")]
    from kubeprof.agent.gpu import frame_keys

    raw = frame_keys.offsets((sys.version_info[0], sys.version_info[1]))
    base_src = subprocess.run(
        ["git", "show", f"{args.base}:{HOOK_SRC}"], cwd=ROOT, check=True, capture_output=True
    ).stdout.decode()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        lib = tmp / "libcupti.so.fake"
        fake = ROOT / "tests/unit/gpu/fake_libcupti.c"
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", lib, fake, "-lpthread"], check=True)
        tree = build(tmp, "tree", (ROOT / HOOK_SRC).read_text())
        hooks = {  # label: (build, in-place frame offsets or None)
            args.base: (build(tmp, "base", base_src), None),
            "tree, api": (tree, None),
        }
        if raw is not None:
            hooks["tree, raw"] = (tree, raw)
        got: dict[str, list[float]] = {k: [] for k in hooks}
        row_bytes = {}
        for _ in range(args.rounds):
            for label, (path, offsets) in hooks.items():
                run = subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        CHILD,
                        str(path),
                        str(lib),
                        str(args.launches),
                        str(args.reps),
                        str(args.depth),
                        str(args.fresh),
                        json.dumps(offsets),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                res = json.loads(run.stdout)
                got[label].append(res["ns_per_launch"])
                row_bytes[label] = res["row_bytes"]
    base = statistics.median(got[args.base])
    for label, values in got.items():
        med = statistics.median(values)
        print(
            f"{label:>10}: {med:7.1f} ns per launch (4 callbacks), launch row {row_bytes[label]} "
            f"bytes, rounds {', '.join(f'{v:.1f}' for v in values)}; {med / base:.2f}x base"
        )


if __name__ == "__main__":
    main()
