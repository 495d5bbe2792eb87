"""Energy and CO2e of a session, by the Cloud Carbon Footprint (CCF) method.

CCF estimates operational emissions as usage x energy coefficient x PUE x grid emission
factor (CCF Methodology). kubeprof measures what CCF has to estimate where it can:

- GPU: NVML's total-energy counter (``energy_mj``, millijoules since the driver loaded),
  the difference of its readings per device; where a device has fewer than two counter
  readings, the integral of its ``power_mw`` readings (trapezoids). ``GpuEnergy.method``
  says which. This replaces CCF's GPU min/max-watts estimate with a measurement.
- CPU: CCF's compute formula, ``vCPUs x (min W + utilisation x (max W - min W)) x hours``,
  with the provider's average min/max watts per vCPU (kubeprof does not know the
  processor). Utilisation is measured: CPU samples are one on-CPU thread at one instant, so
  ``samples / hz`` is the profiled threads' CPU-seconds, and utilisation is those
  CPU-seconds / wall seconds / vCPUs (capped at 1). The vCPUs are the machine's, as CCF
  counts an instance's vCPU-hours; other processes' CPU time is not sampled, so it is a
  lower bound of the machine's utilisation.
- memory: CCF's 0.392 W/GB (0.000392 kWh per GB-hour) over the machine's memory for the
  session's wall time (CCF's GCP rule; its AWS/Azure rule counts only memory above the
  SPECpower per-chip average, which needs the instance type).

The total is multiplied by the PUE (the user's, else CCF's provider or GCP-region default)
and CO2e = kWh x the region's grid emission factor. Coefficients come from
``kubeprof/data/ccf_coefficients.json``, which cites the CCF file of every value.
Embodied emissions, storage and network are not included.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any

from kubeprof.field_error import FieldError
from kubeprof.model import GpuMetricSample

DATA_FILE = Path(__file__).resolve().parents[1] / "data" / "ccf_coefficients.json"
J_PER_KWH = 3.6e6
PUE_RANGE = (1.0, 3.0)  # the CRD's bounds for spec.carbon.pue
COUNTER = "NVML energy counter"
POWER = "NVML power readings, integrated (no energy counter readings)"
# Session meta keys written by the operator from the CRD's spec.carbon (and by record's flags)
META_PROVIDER, META_REGION, META_PUE = "carbon:cloudProvider", "carbon:region", "carbon:pue"


class CarbonError(FieldError):
    """A provider, region or PUE kubeprof cannot use; names the field and the known values."""


@dataclass(frozen=True, slots=True)
class CarbonSettings:
    """Where the workload ran, as the user gave it (flags or the CRD's ``carbon`` field)."""

    provider: str  # aws | gcp | azure
    region: str  # the provider's region name, e.g. us-east-1
    pue: float | None = None  # None: CCF's default for the provider (or GCP region)


def settings_from_meta(meta: Mapping[str, str]) -> CarbonSettings | None:
    """The carbon settings stored with a session, None when it has none."""
    provider, region = meta.get(META_PROVIDER), meta.get(META_REGION)
    if not provider or not region:
        return None
    pue = meta.get(META_PUE)
    try:
        return CarbonSettings(provider, region, float(pue) if pue else None)
    except ValueError:
        raise CarbonError("carbon.pue", f"not a number: {pue!r}") from None


@dataclass(frozen=True, slots=True)
class Coefficients:
    """The CCF numbers for one provider and region, with where each came from."""

    provider: str
    region: str
    min_watts_per_vcpu: float
    max_watts_per_vcpu: float
    memory_kwh_per_gb_hour: float
    pue: float
    pue_basis: str  # "given", or which CCF default
    t_co2e_per_kwh: float  # grid emission factor of the region
    grid_basis: str  # e.g. "US NERC region SERC (EPA eGRID2020) ..."; "" for a country factor
    source: str  # the CCF file the provider's coefficients come from

    @property
    def g_co2e_per_kwh(self) -> float:
        return self.t_co2e_per_kwh * 1e6

    @property
    def memory_watts_per_gb(self) -> float:
        return self.memory_kwh_per_gb_hour * 1000


@cache
def load_table(path: Path = DATA_FILE) -> Mapping[str, Any]:
    """The coefficient table shipped with kubeprof (read once)."""
    data: Mapping[str, Any] = json.loads(path.read_text())
    return data


def coefficients(settings: CarbonSettings, table: Mapping[str, Any] | None = None) -> Coefficients:
    """CCF coefficients for ``settings``; CarbonError naming the field and the known values."""
    providers = (table or load_table())["providers"]
    p = providers.get(settings.provider.lower())
    if p is None:
        raise CarbonError(
            "carbon.cloudProvider",
            f"no CCF coefficients for {settings.provider!r};"
            f" known providers: {', '.join(sorted(providers))}",
        )
    regions = p["emission_factors"]["regions"]
    name = _region(settings.region, regions)
    if name is None:
        raise CarbonError(
            "carbon.region",
            f"no CCF grid emission factor for {settings.provider} "
            f"region {settings.region!r}; known {settings.provider} regions: "
            f"{', '.join(sorted(regions, key=str.lower))}",
        )
    if settings.pue is not None:
        lo, hi = PUE_RANGE
        if not lo <= settings.pue <= hi:
            raise CarbonError("carbon.pue", f"must be from {lo:g} to {hi:g}, got {settings.pue:g}")
        pue, basis = settings.pue, "given"
    elif name in p.get("pue_by_region", {}).get("regions", {}):
        pue, basis = p["pue_by_region"]["regions"][name], f"CCF {settings.provider} {name} default"
    else:
        pue, basis = p["pue"]["value"], f"CCF {settings.provider} average"
    return Coefficients(
        provider=settings.provider.lower(),
        region=name,
        min_watts_per_vcpu=p["min_watts_per_vcpu"]["value"],
        max_watts_per_vcpu=p["max_watts_per_vcpu"]["value"],
        memory_kwh_per_gb_hour=p["memory_kwh_per_gb_hour"]["value"],
        pue=float(pue),
        pue_basis=basis,
        t_co2e_per_kwh=regions[name]["t_co2e_per_kwh"],
        grid_basis=regions[name].get("basis", "").split(" (")[0],
        source=p["min_watts_per_vcpu"]["source"].split(" ")[0],
    )


def _region(region: str, regions: Mapping[str, Any]) -> str | None:
    """The table's name for ``region``; Azure names differ in case between CCF and the CLI."""
    if region in regions:
        return region
    folded = {r.lower(): r for r in regions}
    return folded.get(region.lower())


# -- energy per component -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuEnergy:
    """Measured energy of one GPU over the readings' window."""

    node: str
    device: int
    joules: float
    method: str  # COUNTER or POWER
    start_ns: int  # first reading used
    end_ns: int  # last reading used
    readings: int

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def mean_watts(self) -> float:
        return self.joules / self.seconds if self.seconds > 0 else 0.0


def gpu_energy(metrics_by_node: Mapping[str, Sequence[GpuMetricSample]]) -> tuple[GpuEnergy, ...]:
    """Energy per (node, device): counter differences, else integrated power readings.

    A counter reading lower than the one before (driver reloaded) starts a new run; the
    interval across the reset is lost rather than guessed.
    """
    out = []
    for node, metrics in sorted(metrics_by_node.items()):
        series: dict[tuple[int, str], list[tuple[int, float]]] = defaultdict(list)
        for m in metrics:
            if m.pid == 0 and m.metric in ("energy_mj", "power_mw"):
                series[(m.device, m.metric)].append((m.ts_ns, m.value))
        for dev in sorted({d for d, _ in series}):
            counter = sorted(series.get((dev, "energy_mj"), []))
            power = sorted(series.get((dev, "power_mw"), []))
            if len(counter) >= 2:
                mj = sum(max(0.0, b - a) for (_, a), (_, b) in pairwise(counter))
                out.append(
                    GpuEnergy(
                        node, dev, mj / 1e3, COUNTER, counter[0][0], counter[-1][0], len(counter)
                    )
                )
            elif len(power) >= 2:
                mw_ns = sum((pa + pb) / 2 * (tb - ta) for (ta, pa), (tb, pb) in pairwise(power))
                out.append(
                    GpuEnergy(node, dev, mw_ns / 1e12, POWER, power[0][0], power[-1][0], len(power))
                )
    return tuple(out)


class SteadyDraw:
    """A part drawing `watts` on average over `wall_s`: CPU and memory energy, each by its
    own CCF formula for the watts, share the joules."""

    __slots__ = ()
    wall_s: float

    @property
    def watts(self) -> float:
        raise NotImplementedError

    @property
    def joules(self) -> float:
        return self.watts * self.wall_s


@dataclass(frozen=True, slots=True)
class CpuEnergy(SteadyDraw):
    """CCF compute energy of the machine's vCPUs at the measured utilisation."""

    vcpus: int
    wall_s: float
    samples: int  # on-CPU samples of the profiled threads
    hz: float  # sampling rate per thread
    min_watts_per_vcpu: float
    max_watts_per_vcpu: float

    @property
    def cpu_seconds(self) -> float:
        return self.samples / self.hz if self.hz > 0 else 0.0

    @property
    def utilisation(self) -> float:
        denominator = self.wall_s * self.vcpus
        return min(1.0, self.cpu_seconds / denominator) if denominator > 0 else 0.0

    @property
    def watts(self) -> float:
        lo, hi = self.min_watts_per_vcpu, self.max_watts_per_vcpu
        return self.vcpus * (lo + self.utilisation * (hi - lo))


@dataclass(frozen=True, slots=True)
class MemoryEnergy(SteadyDraw):
    """CCF memory energy: GB x hours x kWh per GB-hour."""

    gb: float
    wall_s: float
    kwh_per_gb_hour: float

    @property
    def watts(self) -> float:
        return self.gb * self.kwh_per_gb_hour * 1000


@dataclass(frozen=True, slots=True)
class EnergyEstimate:
    """A session's energy and CO2e with every input, so a report can show the arithmetic."""

    wall_s: float
    gpus: tuple[GpuEnergy, ...]
    cpu: CpuEnergy | None  # None without coefficients or without the vCPU count
    memory: MemoryEnergy | None  # None without coefficients or without the memory size
    coefficients: Coefficients | None  # None: no provider/region given, GPU energy only
    missing: tuple[str, ...]  # what is not counted, and why

    @property
    def it_joules(self) -> float:
        """Energy at the machine: measured GPU + estimated CPU and memory (before PUE)."""
        parts = [g.joules for g in self.gpus]
        parts += [c.joules for c in (self.cpu, self.memory) if c is not None]
        return sum(parts)

    @property
    def mean_watts(self) -> float:
        """Mean power at the machine: each GPU over its own readings' window, plus CPU/memory."""
        watts = sum(g.mean_watts for g in self.gpus)
        watts += sum(c.watts for c in (self.cpu, self.memory) if c is not None)
        return watts

    @property
    def pue(self) -> float | None:
        return self.coefficients.pue if self.coefficients else None

    @property
    def facility_kwh(self) -> float | None:
        if self.coefficients is None:
            return None
        return self.it_joules * self.coefficients.pue / J_PER_KWH

    @property
    def co2e_g(self) -> float | None:
        kwh = self.facility_kwh
        if kwh is None or self.coefficients is None:
            return None
        return kwh * self.coefficients.g_co2e_per_kwh


def estimate(
    metrics_by_node: Mapping[str, Sequence[GpuMetricSample]],
    *,
    wall_s: float,
    cpu_samples: int,
    hz: float,
    vcpus: int | None,
    memory_gb: float | None,
    coeffs: Coefficients | None,
) -> EnergyEstimate:
    """Energy of a session: GPUs measured, CPU and memory by CCF when the inputs exist."""
    gpus = gpu_energy(metrics_by_node)
    missing = []
    if not gpus:
        missing.append("GPU: no NVML energy-counter or power readings (record with --gpu)")
    cpu = memory = None
    if coeffs is None:
        missing.append(
            "CPU, memory, PUE and CO2e: no cloud provider and region given "
            "(the CRD's spec.carbon, or the provider/region flags)"
        )
    else:
        if vcpus and vcpus > 0:
            cpu = CpuEnergy(
                vcpus, wall_s, cpu_samples, hz, coeffs.min_watts_per_vcpu, coeffs.max_watts_per_vcpu
            )
        else:
            missing.append("CPU: the machine's vCPU count is not known for this session")
        if memory_gb and memory_gb > 0:
            memory = MemoryEnergy(memory_gb, wall_s, coeffs.memory_kwh_per_gb_hour)
        else:
            missing.append("memory: the machine's memory size is not known for this session")
    return EnergyEstimate(wall_s, gpus, cpu, memory, coeffs, tuple(missing))


def explain(e: EnergyEstimate) -> list[str]:
    """The arithmetic, one line per component, for text reports."""
    lines = []
    for g in e.gpus:
        where = f"{g.node} GPU {g.device}" if g.node else f"GPU {g.device}"
        lines.append(
            f"{where}: {g.joules:.1f} J measured ({g.method}, {g.readings} readings "
            f"over {g.seconds:.1f} s of the session's {e.wall_s:.1f} s, mean "
            f"{g.mean_watts:.1f} W)"
        )
    if (c := e.cpu) is not None:
        lines.append(
            f"CPU: {c.vcpus} vCPU x ({c.min_watts_per_vcpu:g} W + {c.utilisation:.3f} x "
            f"({c.max_watts_per_vcpu:g} - {c.min_watts_per_vcpu:g}) W) = {c.watts:.2f} W x "
            f"{c.wall_s:.1f} s = {c.joules:.1f} J; utilisation = {c.cpu_seconds:.1f} CPU-s "
            f"({c.samples} samples / {c.hz:g} Hz) / {c.wall_s:.1f} s / {c.vcpus} vCPU"
        )
    if (m := e.memory) is not None:
        lines.append(
            f"memory: {m.gb:.1f} GB x {m.kwh_per_gb_hour * 1000:g} W/GB x "
            f"{m.wall_s:.1f} s = {m.joules:.1f} J"
        )
    k = e.coefficients
    if k is not None and e.facility_kwh is not None and e.co2e_g is not None:
        lines.append(
            f"total: {e.it_joules:.1f} J x PUE {k.pue:g} ({k.pue_basis}) = "
            f"{e.it_joules * k.pue:.1f} J = {e.facility_kwh:.6f} kWh"
        )
        basis = f", {k.grid_basis}" if k.grid_basis else ""
        lines.append(
            f"CO2e: {e.facility_kwh:.6f} kWh x {k.g_co2e_per_kwh:.1f} g/kWh "
            f"({k.provider} {k.region}{basis}) = {e.co2e_g:.3f} g"
        )
    else:
        lines.append(f"total: {e.it_joules:.1f} J at the machine (no PUE, no CO2e)")
    lines += [f"not counted: {m}" for m in e.missing]
    return lines
