"""The session spec parsed once: the example, the defaults, and each bad field naming itself."""

import copy
from pathlib import Path

import pytest
import yaml

from kubeprof.operator.spec import (
    DEFAULT_CPU_HZ,
    DEFAULT_NVML_INTERVAL_MS,
    Carbon,
    CpuProfiler,
    GpuProfiler,
    Profilers,
    SessionSpec,
    SpecError,
    TargetSpec,
    parse,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "profilingsession.yaml"
MINIMAL = {
    "target": {"namespace": "ml", "podSelector": {"matchLabels": {"app": "t"}}},
    "duration": "90s",
}


def test_the_example_parses_completely():
    spec = parse(yaml.safe_load(EXAMPLE.read_text())["spec"])
    assert spec == SessionSpec(
        target=TargetSpec("ml-team", "app=trainer", {"nvidia.com/gpu.present": "true"}),
        duration_s=120.0,
        profilers=Profilers(CpuProfiler(True, 99), GpuProfiler(True, False, 500)),
        carbon=Carbon("aws", "us-east-1", 1.2),
    )
    assert spec.carbon is not None
    assert spec.carbon.meta() == {
        "carbon:cloudProvider": "aws",
        "carbon:region": "us-east-1",
        "carbon:pue": "1.2",
    }


def test_defaults():
    spec = parse(MINIMAL)
    assert spec.duration_s == 90.0 and spec.carbon is None
    assert spec.target.node_selector == {}
    assert spec.profilers.cpu == CpuProfiler(enabled=True, frequency_hz=DEFAULT_CPU_HZ)
    assert spec.profilers.gpu == GpuProfiler(
        enabled=True, kernel_tracing=False, metrics_interval_ms=DEFAULT_NVML_INTERVAL_MS
    )
    assert (DEFAULT_CPU_HZ, DEFAULT_NVML_INTERVAL_MS) == (99, 1000)
    assert Carbon("gcp", "europe-west4").meta() == {
        "carbon:cloudProvider": "gcp",
        "carbon:region": "europe-west4",
    }


def test_selector_expressions_become_the_query_string():
    spec = copy.deepcopy(MINIMAL)
    spec["target"]["podSelector"] = {
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["b", "a"]},
            {"key": "gpu", "operator": "Exists"},
        ]
    }
    assert parse(spec).target.selector == "tier in (a,b),gpu"


def _with(path: str, value):
    """MINIMAL with `value` at the dotted `path` (None deletes the key)."""
    spec = copy.deepcopy(MINIMAL)
    *parents, last = path.split(".")
    node = spec
    for p in parents:
        node = node.setdefault(p, {})
    if value is None:
        del node[last]
    else:
        node[last] = value
    return spec


@pytest.mark.parametrize(
    ("path", "value", "field", "hint"),
    [
        ("target", None, "spec.target", "namespace and podSelector"),
        ("target", "ml", "spec.target", "must be an object"),
        ("target.namespace", "", "spec.target.namespace", "required"),
        ("target.podSelector", {}, "spec.target.podSelector", "must not be empty"),
        (
            "target.podSelector",
            {"matchExpressions": [{"key": "a", "operator": "Near"}]},
            "spec.target.podSelector.matchExpressions[0].operator",
            "In, NotIn, Exists",
        ),
        (
            "target.podSelector",
            {"matchExpressions": [{"key": "a", "operator": "In"}]},
            "spec.target.podSelector.matchExpressions[0].values",
            "must be specified when `operator` is 'In'",
        ),
        (
            "target.podSelector",
            {"matchExpressions": [{"operator": "Exists"}]},
            "spec.target.podSelector.matchExpressions[0].key",
            "label key",
        ),
        (
            "target.podSelector",
            {"matchLabels": {"app": 1}},
            "spec.target.podSelector.matchLabels.app",
            "quote it",
        ),
        ("target.nodeSelector", {"gpu": True}, "spec.target.nodeSelector.gpu", "strings"),
        ("duration", None, "spec.duration", "e.g. 90s"),
        ("duration", "5d", "spec.duration", "not a duration"),
        ("duration", "48h", "spec.duration", "between 1s and 24h"),
        ("duration", "500ms", "spec.duration", "between 1s and 24h"),
        ("profilers", [], "spec.profilers", "must be an object"),
        ("profilers.cpu.frequencyHz", 100000, "spec.profilers.cpu.frequencyHz", "1 to 1000"),
        ("profilers.cpu.frequencyHz", "99", "spec.profilers.cpu.frequencyHz", "integer"),
        ("profilers.cpu.offCpuMinMicros", -1, "spec.profilers.cpu.offCpuMinMicros", "0 to"),
        ("profilers.cpu.offCpuEvery", 2.5, "spec.profilers.cpu.offCpuEvery", "integer"),
        ("profilers.cpu.enabled", "yes", "spec.profilers.cpu.enabled", "true or false"),
        (
            "profilers.gpu.metricsIntervalMs",
            1,
            "spec.profilers.gpu.metricsIntervalMs",
            "10 to 60000",
        ),
        ("profilers.gpu.kernelTracing", 1, "spec.profilers.gpu.kernelTracing", "true or false"),
        (
            "profilers",
            {"cpu": {"enabled": False}, "gpu": {"enabled": False}},
            "spec.profilers",
            "at least one of cpu and gpu",
        ),
        (
            "carbon",
            {"cloudProvider": "ibm", "region": "x"},
            "spec.carbon.cloudProvider",
            "aws, gcp, azure, onprem",
        ),
        ("carbon", {"cloudProvider": "aws"}, "spec.carbon.region", "us-east-1"),
        (
            "carbon",
            {"cloudProvider": "aws", "region": "x", "pue": 0.5},
            "spec.carbon.pue",
            "1 to 3",
        ),
        (
            "carbon",
            {"cloudProvider": "aws", "region": "x", "pue": "low"},
            "spec.carbon.pue",
            "power usage effectiveness",
        ),
    ],
)
def test_each_bad_field_names_itself_and_the_fix(path, value, field, hint):
    with pytest.raises(SpecError) as err:
        parse(_with(path, value))
    assert err.value.path == field
    assert str(err.value).startswith(f"{field}: ") and hint in str(err.value), str(err.value)
