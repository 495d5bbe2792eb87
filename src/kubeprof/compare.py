"""`kubeprof compare SESSION...`: runs of one workload side by side, with batch-size guidance
and energy per sample (runs tagged by `--label`, kubeprof.labels).

Loads each session through the storage queries (read only), reduces it with the pure
analyses (`analysis.batch_scaling`, `analysis.energy`) and prints one table and the verdicts.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from kubeprof.analysis import batch_scaling, energy
from kubeprof.labels import (  # noqa: F401 - compare's label API, re-exported
    LABEL_KEY,
    LABEL_PREFIX,
    MAX_LABEL_VALUE,
    LabelError,
    labels_meta,
    parse_label,
    session_labels,
)
from kubeprof.storage import Store, StoreError
from kubeprof.storage import compare_queries as cq
from kubeprof.storage import queries as q

# Machine size, when the recorder stored it; else read here if the session was recorded here.
META_VCPUS, META_MEMORY_GB = "host:vcpus", "host:memory_gb"


@dataclass(frozen=True, slots=True)
class Compared:
    """One session reduced to what the comparison shows."""

    run: batch_scaling.Run
    energy: energy.EnergyEstimate


def compare_command(
    refs: list[str],
    store_url: str | None,
    *,
    carbon: energy.CarbonSettings | None = None,
    out: TextIO | None = None,
) -> int:
    """Print the comparison of the sessions ``refs`` (names or ids); 2 on a user error.

    ``carbon`` (from flags) overrides each session's stored ``carbon:*`` settings.
    """
    out = out or sys.stdout
    if not refs:
        print(
            "kubeprof compare: name at least one session (`kubeprof sessions` lists them)",
            file=sys.stderr,
        )
        return 2
    try:
        rows = load(refs, store_url, carbon)
    except (StoreError, LookupError, energy.CarbonError) as exc:
        print(f"kubeprof compare: {exc}", file=sys.stderr)
        return 2
    if len(rows) >= 2 and all(r.run.batch_size is None for r in rows):
        names = [r.run.name for r in rows]
        print(
            "kubeprof compare: no batch_size label on these sessions: compare is the "
            "batch-size tool (record each run with --label batch_size=N); to compare runs "
            f"function by function use `kubeprof diff {names[0]} {names[1]}`",
            file=sys.stderr,
        )
    out.write(render(rows))
    return 0


def load(
    refs: Sequence[str], store_url: str | None, carbon: energy.CarbonSettings | None
) -> list[Compared]:
    """Each session's run figures and energy estimate (reads the store, nothing else)."""
    store = Store.open(store_url)
    rows = []
    try:
        with store.engine.connect() as conn:
            for ref in refs:
                info = q.find_session(conn, ref)
                activities = q.gpu_activities(conn, info.id)
                metrics = q.gpu_metrics(conn, info.id)
                run = batch_scaling.run_from_records(
                    info.name,
                    session_labels(info.meta),
                    activities,
                    metrics,
                    info.start_ns,
                    info.end_ns,
                )
                settings = carbon or energy.settings_from_meta(info.meta)
                coeffs = energy.coefficients(settings) if settings else None
                vcpus, memory_gb = _machine(info.meta, cq.session_host(conn, info.id))
                est = energy.estimate(
                    cq.energy_metrics_by_node(conn, info.id),
                    wall_s=info.duration_s,
                    cpu_samples=info.samples,
                    hz=info.hz,
                    vcpus=vcpus,
                    memory_gb=memory_gb,
                    coeffs=coeffs,
                )
                rows.append(Compared(run, est))
    finally:
        store.close()
    return rows


def _machine(meta: Mapping[str, str], host: str) -> tuple[int | None, float | None]:
    """vCPUs and memory (GB) of the recording machine: stored in meta, else this machine's
    when the session was recorded here, else unknown."""
    try:
        vcpus = int(meta[META_VCPUS]) if META_VCPUS in meta else None
        memory = float(meta[META_MEMORY_GB]) if META_MEMORY_GB in meta else None
    except ValueError:
        vcpus = memory = None
    if host and host == socket.gethostname():
        if vcpus is None:
            vcpus = os.cpu_count()
        if memory is None:
            import psutil

            memory = psutil.virtual_memory().total / 1e9
    return vcpus, memory


def render(rows: Sequence[Compared]) -> str:
    """The table, the verdicts, what is missing, and each session's energy arithmetic."""
    scaling = batch_scaling.analyse([r.run for r in rows])
    full = all(
        r.energy.coefficients is not None
        and r.energy.cpu is not None
        and r.energy.memory is not None
        for r in rows
    )
    head = (
        "SESSION",
        "BATCH",
        "STEPS/S",
        "SAMPLES/S",
        "GPU BUSY",
        "DRAM %",
        "TENSOR %",
        "J/SAMPLE",
    )
    table = [head]
    for r in rows:
        run = r.run
        table.append(
            (
                run.name,
                _num(run.batch_size, "{}"),
                _num(run.steps_per_s, "{:.3g}"),
                _num(run.samples_per_s, "{:.4g}"),
                _num(run.gpu_busy, "{:.0%}"),
                _num(run.dram_pct, "{:.0f}"),
                _num(run.tensor_pct, "{:.0f}"),
                _num(_j_per_sample(r, full), "{:.3g}"),
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in table
    ]
    lines.append("")
    lines.append(
        "J/SAMPLE = "
        + (
            "mean power (GPU measured + CCF CPU and memory) x PUE / samples per s"
            if full
            else "mean measured GPU power / samples per s (GPU only, no PUE: not every "
            "session has a cloud provider, region and machine size)"
        )
    )
    lines.append("")
    lines.append("verdict:")
    lines += [f"  {v}" for v in scaling.verdicts]
    per_sample = {r.run.name: j for r in rows if (j := _j_per_sample(r, full)) is not None}
    if len(per_sample) >= 2:
        best = min(per_sample, key=per_sample.__getitem__)
        lines.append(f"  lowest energy per sample: {best} ({per_sample[best]:.3g} J/sample)")
    if scaling.missing:
        lines.append("missing signals:")
        lines += [f"  {m}" for m in scaling.missing]
    lines.append("")
    lines.append("energy (Cloud Carbon Footprint method):")
    for r in rows:
        e = r.energy
        kwh, co2 = e.facility_kwh, e.co2e_g
        head_line = (
            f"{kwh:.6f} kWh, {co2:.3f} g CO2e"
            if kwh is not None and co2 is not None
            else f"{e.it_joules / energy.J_PER_KWH:.6f} kWh at the machine, no CO2e"
        )
        lines.append(f"  {r.run.name}: {head_line}")
        lines += [f"    {x}" for x in energy.explain(e)]
    return "\n".join(lines) + "\n"


def _j_per_sample(r: Compared, full: bool) -> float | None:
    sps = r.run.samples_per_s
    e = r.energy
    if not sps or (not e.gpus and not full):
        return None
    if full and e.pue is not None:
        return e.mean_watts * e.pue / sps
    return sum(g.mean_watts for g in e.gpus) / sps


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)
