"""A ProfilingSession's spec as typed, frozen values, parsed once per reconcile pass.

The CRD's OpenAPI/CEL schema is the first line: the API server already refuses most bad
specs with a message naming the field. `parse` is the second line, for objects written
before a schema change or by a client that skipped validation: every `SpecError` names
the field (as `spec.a.b`) and says what a valid value looks like.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeprof.field_error import FieldError
from kubeprof.operator import selector
from kubeprof.protocol.settings import (
    DEFAULT_CPU_HZ,
    DEFAULT_NVML_INTERVAL_S,
    DEFAULT_OFFCPU_EVERY,
    DEFAULT_OFFCPU_MIN_US,
)

DEFAULT_NVML_INTERVAL_MS = round(DEFAULT_NVML_INTERVAL_S * 1000)  # the CRD speaks milliseconds

CPU_HZ_RANGE = (1, 1000)
OFFCPU_MIN_US_RANGE = (0, 10_000_000)  # waits shorter than this get no stack (up to 10 s)
OFFCPU_EVERY_RANGE = (0, 1_000_000)  # follow 1 in N switch-outs; 0 turns the probe off
NVML_INTERVAL_MS_RANGE = (10, 60000)
DURATION_RANGE_S = (1.0, 24 * 3600.0)
PUE_RANGE = (1.0, 3.0)
CLOUD_PROVIDERS = ("aws", "gcp", "azure", "onprem")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class SpecError(FieldError):
    """A spec the operator cannot run; the message names the field and the fix."""

    @property
    def path(self) -> str:
        """The spec field's path, e.g. spec.profilers.cpu.hz."""
        return self.field


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """Which pods to profile."""

    namespace: str
    selector: str  # the podSelector as a labelSelector query string, e.g. "app=t,gpu"
    node_selector: Mapping[str, str] = field(default_factory=dict)  # node labels, all must match


@dataclass(frozen=True, slots=True)
class CpuProfiler:
    enabled: bool = True
    frequency_hz: int = DEFAULT_CPU_HZ  # samples per second per thread
    offcpu_min_us: int = DEFAULT_OFFCPU_MIN_US  # the off-CPU probe's knobs (AgentSettings)
    offcpu_every: int = DEFAULT_OFFCPU_EVERY


@dataclass(frozen=True, slots=True)
class GpuProfiler:
    enabled: bool = True
    # Trace every CUDA kernel (CUPTI injection). Parsed now; the cluster agents cannot do it
    # until the injected tracer exists, and the session's status says so.
    kernel_tracing: bool = False
    metrics_interval_ms: int = DEFAULT_NVML_INTERVAL_MS  # NVML sampling period


@dataclass(frozen=True, slots=True)
class Profilers:
    cpu: CpuProfiler = CpuProfiler()
    gpu: GpuProfiler = GpuProfiler()


@dataclass(frozen=True, slots=True)
class Carbon:
    """Where the workload runs, for energy and CO2 estimates (Cloud Carbon Footprint method)."""

    cloud_provider: str  # one of CLOUD_PROVIDERS
    region: str  # the provider's region name, e.g. us-east-1
    pue: float | None = None  # data-centre power usage effectiveness; None = provider default

    def meta(self) -> dict[str, str]:
        """As entries of the session row's meta, read by the energy analysis."""
        out = {"carbon:cloudProvider": self.cloud_provider, "carbon:region": self.region}
        if self.pue is not None:
            out["carbon:pue"] = f"{self.pue:g}"
        return out


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """Everything a ProfilingSession asks for."""

    target: TargetSpec
    duration_s: float  # how long to profile, from the start of the session
    profilers: Profilers = Profilers()
    carbon: Carbon | None = None  # no energy/CO2 estimate when absent


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration ("90s", "1h30m"); ValueError when malformed."""
    text = text.strip()
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 10m, 1h30m)")
    return total


def _section(parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{path}.{key}", f"must be an object, got {type(value).__name__}")
    return value


def _bool(section: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    value = section.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(f"{path}.{key}", f"must be true or false, got {value!r}")
    return value


def _int(
    section: Mapping[str, Any], key: str, path: str, default: int, bounds: tuple[int, int]
) -> int:
    value = section.get(key, default)
    lo, hi = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise SpecError(f"{path}.{key}", f"must be an integer from {lo} to {hi}, got {value!r}")
    return value


def _labels(section: Mapping[str, Any], key: str, path: str) -> dict[str, str]:
    value = _section(section, key, path)
    problems = selector.validate_labels(value, f"{path}.{key}")
    if problems:
        raise SpecError(problems[0].path, problems[0].problem)
    return dict(value)


def _target(spec: Mapping[str, Any]) -> TargetSpec:
    path = "spec.target"
    if "target" not in spec:
        raise SpecError(path, "required: give namespace and podSelector of the pods to profile")
    tgt = _section(spec, "target", "spec")
    ns = tgt.get("namespace")
    if not isinstance(ns, str) or not ns:
        raise SpecError(f"{path}.namespace", "required: the namespace of the target pods")
    sel = _section(tgt, "podSelector", path)
    problems = selector.validate(sel, f"{path}.podSelector")
    if problems:
        raise SpecError(problems[0].path, problems[0].problem)
    if not sel.get("matchLabels") and not sel.get("matchExpressions"):
        raise SpecError(
            f"{path}.podSelector",
            "must not be empty: give matchLabels or "
            "matchExpressions (an empty selector would profile every pod)",
        )
    return TargetSpec(ns, selector.to_query(sel), _labels(tgt, "nodeSelector", path))


def _duration(spec: Mapping[str, Any]) -> float:
    text = spec.get("duration")
    if not isinstance(text, str):
        raise SpecError("spec.duration", "required: how long to profile, e.g. 90s, 10m, 1h30m")
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise SpecError(
            "spec.duration", f"not a duration: {text!r} (use e.g. 90s, 10m, 1h30m)"
        ) from None
    lo, hi = DURATION_RANGE_S
    if not lo <= seconds <= hi:
        raise SpecError("spec.duration", f"must be between 1s and 24h, got {text!r}")
    return seconds


def _profilers(spec: Mapping[str, Any]) -> Profilers:
    path = "spec.profilers"
    prof = _section(spec, "profilers", "spec")
    cpu, gpu = _section(prof, "cpu", path), _section(prof, "gpu", path)
    out = Profilers(
        CpuProfiler(
            _bool(cpu, "enabled", f"{path}.cpu", True),
            _int(cpu, "frequencyHz", f"{path}.cpu", DEFAULT_CPU_HZ, CPU_HZ_RANGE),
            _int(cpu, "offCpuMinMicros", f"{path}.cpu", DEFAULT_OFFCPU_MIN_US, OFFCPU_MIN_US_RANGE),
            _int(cpu, "offCpuEvery", f"{path}.cpu", DEFAULT_OFFCPU_EVERY, OFFCPU_EVERY_RANGE),
        ),
        GpuProfiler(
            _bool(gpu, "enabled", f"{path}.gpu", True),
            _bool(gpu, "kernelTracing", f"{path}.gpu", False),
            _int(
                gpu,
                "metricsIntervalMs",
                f"{path}.gpu",
                DEFAULT_NVML_INTERVAL_MS,
                NVML_INTERVAL_MS_RANGE,
            ),
        ),
    )
    if not out.cpu.enabled and not out.gpu.enabled:
        raise SpecError(path, "must enable at least one of cpu and gpu")
    return out


def _carbon(spec: Mapping[str, Any]) -> Carbon | None:
    if spec.get("carbon") is None:
        return None
    path = "spec.carbon"
    c = _section(spec, "carbon", "spec")
    provider = c.get("cloudProvider")
    if provider not in CLOUD_PROVIDERS:
        raise SpecError(
            f"{path}.cloudProvider",
            f"must be one of {', '.join(CLOUD_PROVIDERS)}, got {provider!r}",
        )
    region = c.get("region")
    if not isinstance(region, str) or not region:
        raise SpecError(f"{path}.region", "required: the provider's region, e.g. us-east-1")
    pue = c.get("pue")
    lo, hi = PUE_RANGE
    if pue is not None and (
        isinstance(pue, bool) or not isinstance(pue, int | float) or not lo <= pue <= hi
    ):
        raise SpecError(
            f"{path}.pue",
            f"must be a number from {lo:g} to {hi:g} (power usage "
            f"effectiveness of the data centre), got {pue!r}",
        )
    return Carbon(provider, region, None if pue is None else float(pue))


def parse(spec: Mapping[str, Any]) -> SessionSpec:
    """The typed spec of a ProfilingSession; SpecError naming the first bad field."""
    return SessionSpec(_target(spec), _duration(spec), _profilers(spec), _carbon(spec))
