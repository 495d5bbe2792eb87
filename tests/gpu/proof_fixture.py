"""Turn one H200 agent-proof run ($OUT of tests/gpu/agent_proof_run.sh) into CI fixtures.

Per phase: ``<phase>.batches.jsonl.gz`` (every request body the agent posted, as recorded by
the ingest) and ``<phase>.json.gz``: the pods (UID, mode, whether injected, the workload's own
KUBEPROF_TRUTH line with its per-step CUDA-event timings), the tracer state timeline, when
the agent started and exited, and what the run's own aggregation over PostgreSQL reported.

    python tests/gpu/proof_fixture.py OUT_DIR tests/fixtures/gpu/agent_proof
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.gpu import proof_check


def main(out: Path, dest: Path) -> None:
    summary = json.loads((out / "proof_summary.json").read_text())
    env = (out / "env.txt").read_text().splitlines()
    work = Path(tempfile.mkdtemp())
    with tarfile.open(out / "proof.tgz") as t:
        t.extractall(work)
    dest.mkdir(parents=True, exist_ok=True)
    for name, ph in summary["phases"].items():
        d = work / name
        shutil.copy(d / f"{name}.batches.jsonl.gz", dest / f"{name}.batches.jsonl.gz")
        pods = {}
        for pod, rep in ph["pods"].items():
            truth = proof_check.truth_line((d / f"{pod}.stdout").read_text())
            pods[pod] = {
                "uid": rep["uid"],
                "mode": rep["mode"],
                "injected": rep["injected"],
                "truth": truth,
                "device_report": {k: v for k, v in rep.items() if k not in ("stderr_tail",)},
            }
        meta = {
            "phase": name,
            "recorded_on": env[0] if env else "",
            "env": env[:5],
            "store": summary["store"],
            "agent_start_ns": ph["agent_start_ns"],
            "agent_exit_ns": ph["agent_exit_ns"],
            "agent_rc": ph["agent_rc"],
            "bodies": ph["bodies"],
            "bodies_with_kernels": ph.get("bodies_with_kernels"),
            "timeline": ph["timeline"],
            "status": ph["status"],
            "agent_log": (d / "agent.log").read_text()[-6000:],
            "pods": pods,
        }
        with gzip.open(dest / f"{name}.json.gz", "wt") as f:
            json.dump(meta, f, indent=1)
        print(
            name,
            {
                p: (v["device_report"]["gpu_idle"], v["device_report"]["truth_idle_window"])
                for p, v in pods.items()
            },
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
