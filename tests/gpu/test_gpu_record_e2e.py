"""On a GPU: ``kubeprof record --gpu --no-cpu -- python examples/train_torch.py`` end to end."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from harness import NO_MULTICAST, REPO

pytestmark = pytest.mark.gpu


def test_record_gpu_then_report(tmp_path) -> None:
    import os

    store = f"sqlite:///{tmp_path / 'kp.db'}"
    env = {**os.environ, **NO_MULTICAST}
    cli = [sys.executable, "-m", "kubeprof.cli"]
    rec = subprocess.run(
        [
            *cli,
            "record",
            "--gpu",
            "--no-cpu",
            "--store",
            store,
            "-o",
            "e2e",
            "--",
            sys.executable,
            "examples/train_torch.py",
            "--steps",
            "60",
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    print(rec.stdout[-1500:], rec.stderr[-1500:])
    assert rec.returncode == 0
    rep = subprocess.run(
        [*cli, "report", "e2e", "--store", store, "--format", "text"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    print(rep.stdout[-4000:], rep.stderr[-1000:])
    assert rep.returncode == 0
    m = re.search(r"kernels: ([\d,]+) .*attributed to a Python stack: ([\d.]+) %", rep.stdout)
    assert m, rep.stdout[-2000:]
    assert int(m.group(1).replace(",", "")) > 60 * 50
    # Every kernel has its Python stack but unbind's backward `cat`: the view launched no
    # forward kernel to take a line from (BENCHMARKS.md: 1.1 % on the H200, 1.6 % on an H100).
    # The report says so; nothing else is left unexplained (rounding: 0.1 each).
    nf = re.search(r"not attributed: ([\d.]+) % backward kernels of autograd nodes", rep.stdout)
    no_forward = float(nf.group(1)) if nf else 0.0
    assert float(m.group(2)) + no_forward >= 99.8, (m.group(2), no_forward)
    assert no_forward < 3.0
    assert "GPU idle ratio" in rep.stdout and "Top kernels" in rep.stdout
    html = tmp_path / "e2e.html"
    h = subprocess.run(
        [*cli, "report", "e2e", "--store", store, "--format", "html", "--out", str(html)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert h.returncode == 0, h.stderr[-1000:]
    assert "kubeprof-gpu" in html.read_text()
