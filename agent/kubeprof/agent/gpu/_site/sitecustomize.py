"""Loaded by Python at start-up when this folder is on PYTHONPATH: starts kubeprof's GPU tracer.

Kept tiny and defensive: any failure prints one line and the program runs untraced. A
``sitecustomize`` that this one shadows (later on sys.path) is run afterwards.
"""

import os
import sys


def _kubeprof_gpu() -> None:
    try:
        from kubeprof.agent.gpu.inject import bootstrap

        bootstrap()
    except Exception as exc:  # never break the workload's start-up  # noqa: BLE001 - must never break the workload
        if os.environ.get("KUBEPROF_GPU_QUIET") != "1":
            sys.stderr.write(f"kubeprof-gpu: GPU tracing off: {exc}\n")


def _chain() -> None:
    """Run the next sitecustomize on sys.path, which ours hides."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location(
                "_kubeprof_chained_sitecustomize", candidate
            )
            if spec and spec.loader:
                try:
                    spec.loader.exec_module(importlib.util.module_from_spec(spec))
                except Exception as exc:  # noqa: BLE001 - must never break the workload
                    sys.stderr.write(f"kubeprof-gpu: chained sitecustomize failed: {exc}\n")
            return


_kubeprof_gpu()
_chain()
