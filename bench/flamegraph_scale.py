"""How the HTML flame graph scales: render time, output size and memory per stack count.

Usage: .venv/bin/python bench/flamegraph_scale.py [--sizes 10000,100000,1000000] [--out FILE]

Each size runs in a fresh subprocess (so peak RSS is that size's own). Profiles come from
tests/support/synthetic.py: N distinct CPU stacks (plus N/50 GPU stacks, so both views are
embedded). Where headless Chromium is installed, the page is also opened and the page's own
timings (JSON parse; prepare + first layout + draw) are read back from the DOM.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def measure_one(n: int) -> dict[str, float | int | str]:
    """Build a profile of n stacks, render it, and (if possible) open it in Chromium."""
    sys.path.insert(0, str(REPO))  # for tests.support
    from kubeprof.report.flamegraph import render_html
    from kubeprof.report.tree import build_tree
    from tests.support.synthetic import synthetic_profile

    profile = synthetic_profile(n, gpu_stacks=max(n // 50, 1))
    c, t = time.process_time(), time.perf_counter()
    nodes = len(build_tree(profile.cpu))
    tree_cpu, tree_wall = time.process_time() - c, time.perf_counter() - t
    c, t = time.process_time(), time.perf_counter()
    page = render_html(profile)
    render_cpu, render_wall = time.process_time() - c, time.perf_counter() - t
    data = page.encode()
    row: dict[str, float | int | str] = {
        "stacks": n,
        "nodes": nodes,
        "tree": f"{tree_cpu:.2f} ({tree_wall:.2f})",
        "render": f"{render_cpu:.2f} ({render_wall:.2f})",
        "size_mb": len(data) / 1e6,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "parse_ms": "n/a",
        "first_draw_ms": "n/a",
    }
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "page.html"
            path.write_bytes(data)
            cmd = [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--window-size=1400,900",
            ]
            cmd += ["--virtual-time-budget=60000", "--dump-dom", path.as_uri()]
            dom = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
        for key, attr in (("parse_ms", "data-parse-ms"), ("first_draw_ms", "data-first-draw-ms")):
            found = re.search(attr + r'="([0-9.]+)"', dom)
            row[key] = float(found.group(1)) if found else "failed"
    return row


def table(rows: list[dict]) -> str:
    head = (
        "| distinct stacks | tree nodes | build_tree CPU s (wall) "
        "| render_html, both views: CPU s (wall) "
        "| HTML size (MB) | peak RSS (MB) | browser JSON.parse (ms) "
        "| browser prepare+first draw (ms) |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    body = "".join(
        f"| {r['stacks']:,} | {r['nodes']:,} | {r['tree']} | {r['render']} "
        f"| {r['size_mb']:.1f} | {r['rss_mb']:.0f} | {r['parse_ms']} | {r['first_draw_ms']} |\n"
        for r in rows
    )
    return head + body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--out", type=Path, help="also write the table (with the command) here")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # child process mode
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_one(args.one)))
        return
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        child = subprocess.run(
            [sys.executable, __file__, "--one", str(n)],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        )
        rows.append(json.loads(child.stdout))
        print(f"{n:,} stacks done", file=sys.stderr)
    result = table(rows)
    print(result)
    if args.out:
        command = " ".join([".venv/bin/python", "bench/flamegraph_scale.py", *sys.argv[1:]])
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        args.out.write_text(
            "## HTML flame graph scale (bench/flamegraph_scale.py)\n\n"
            f"Command: `{command}`\n\n"
            f"Machine: {os.cpu_count()} CPUs, load average at the end {load} (wall times "
            "include waiting for a CPU; CPU seconds do not). Browser columns: headless "
            "Chromium, timings the page itself records.\n\n"
            f"{result}"
        )


if __name__ == "__main__":
    main()
