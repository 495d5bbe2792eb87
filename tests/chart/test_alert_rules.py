"""The chart's alerts through Prometheus' own promtool: each fires on the series it is for,
and stays silent just under its threshold and when above it for less than its `for` time.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import chart

pytestmark = pytest.mark.usefixtures("helm_built")

JOB = "kp-kubeprof"  # the Service name, the `job` a ServiceMonitor gives
RUNBOOK = "https://github.com/kubeprof/kubeprof/blob/main/README.md#alert-"


@pytest.fixture(scope="module")
def promtool() -> Path:
    p = chart.promtool_path()
    if p is None:
        pytest.fail("promtool not found: run make setup (installs Debian's prometheus)")
    return p


def _rules(tmp_path: Path, values: dict[str, Any]) -> Path:
    docs = chart.render({"prometheusRule": {"enabled": True, **values}})
    return chart.rules_file(docs, tmp_path / "rules.yaml")


def _promtool(promtool: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], capture_output=True, text=True, check=False)


def _idle(pod: str, node: str, gpu: str) -> str:
    """A session's series, as the operator exports it."""
    return (
        f'kubeprof_gpu_idle_ratio{{job="{JOB}",session_namespace="ml",session="train",'
        f'namespace="ml",node="{node}",gpu="{gpu}",pod="{pod}"}}'
    )


def _idle_labels(pod: str, node: str, gpu: str, severity: str = "warning") -> dict[str, str]:
    return {
        "severity": severity,
        "namespace": "ml",
        "session_namespace": "ml",
        "session": "train",
        "node": node,
        "gpu": gpu,
        "pod": pod,
    }


def _light(pod: str, node: str, gpu: str) -> str:
    """A light agent's series: the pod's namespace, name and container; no session."""
    return (
        f'kubeprof_gpu_idle_ratio{{job="kubeprof-light",namespace="ml",pod="{pod}",'
        f'container="main",node="{node}",gpu="{gpu}"}}'
    )


def _light_labels(pod: str, node: str, gpu: str) -> dict[str, str]:
    return {
        "severity": "warning",
        "namespace": "ml",
        "pod": pod,
        "container": "main",
        "node": node,
        "gpu": gpu,
    }


def _gpu_tests(threshold: float, for_min: int) -> list[dict[str, Any]]:
    """Three pods: idle well above the threshold all along; just under it all along; far
    above it, but only for one minute less than `for`."""
    n = for_min + 10
    under = round(threshold - 0.01, 2)
    series = [
        {"series": _idle("busy-idle", "gpu-a", "3"), "values": f"{threshold + 0.1:.2f}x{n}"},
        {"series": _idle("just-under", "gpu-b", "0"), "values": f"{under}x{n}"},
        {"series": _idle("short-spike", "gpu-c", "1"), "values": f"0.99x{for_min - 2} 0.05x{n}"},
    ]
    fired = {
        "exp_labels": _idle_labels("busy-idle", "gpu-a", "3"),
        "exp_annotations": {
            "summary": f"GPU 3 on gpu-a idle {round((threshold + 0.1) * 100):g}% "
            "for pod ml/busy-idle",
            "description": (
                f"GPU 3 on node gpu-a, used by pod busy-idle in namespace ml, ran no "
                f"kernel {round((threshold + 0.1) * 100):g}% of the time (ProfilingSession "
                f"ml/train), above {threshold:g} for at least {for_min}m. See the "
                "session's findings: kubectl get profilingsession -n ml train -o yaml"
            ),
            "runbook_url": RUNBOOK + "kubeprofgpuidleratiohigh",
        },
    }
    return [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                # Pending, not firing: above the threshold for one minute less than `for`.
                {
                    "eval_time": f"{for_min - 1}m",
                    "alertname": "KubeprofGPUIdleRatioHigh",
                    "exp_alerts": [],
                },
                # From `for` on, only the pod that stayed above it.
                {
                    "eval_time": f"{for_min}m",
                    "alertname": "KubeprofGPUIdleRatioHigh",
                    "exp_alerts": [fired],
                },
                {
                    "eval_time": f"{for_min + 5}m",
                    "alertname": "KubeprofGPUIdleRatioHigh",
                    "exp_alerts": [fired],
                },
            ],
        }
    ]


def _light_tests() -> list[dict[str, Any]]:
    """The light agent's series fire too, and their description names no session."""
    fired = {
        "exp_labels": {
            "severity": "warning",
            "namespace": "ml",
            "pod": "loader-starved",
            "container": "main",
            "node": "gpu-d",
            "gpu": "2",
        },
        "exp_annotations": {
            "summary": "GPU 2 on gpu-d idle 90% for pod ml/loader-starved",
            "description": (
                "GPU 2 on node gpu-d, used by pod loader-starved in namespace ml, ran no "
                "kernel 90% of the time (light agent, container main), above 0.5 for at "
                "least 10m. Profiles a ProfilingPolicy captured for it: kubectl get "
                "profilingsessions -n ml -l kubeprof.dev/policy-pod=loader-starved"
            ),
            "runbook_url": RUNBOOK + "kubeprofgpuidleratiohigh",
        },
    }
    return [
        {
            "interval": "1m",
            "input_series": [
                {"series": _light("loader-starved", "gpu-d", "2"), "values": "0.9x30"},
                {"series": _light("busy", "gpu-d", "3"), "values": "0.1x30"},
            ],
            "alert_rule_test": [
                {"eval_time": "9m", "alertname": "KubeprofGPUIdleRatioHigh", "exp_alerts": []},
                {
                    "eval_time": "12m",
                    "alertname": "KubeprofGPUIdleRatioHigh",
                    "exp_alerts": [fired],
                },
            ],
        }
    ]


def _operator_tests() -> list[dict[str, Any]]:
    down = {
        "exp_labels": {"severity": "critical"},
        "exp_annotations": {
            "summary": "kubeprof operator is down",
            "description": f'No successful scrape of the kubeprof operator (job "{JOB}") for 5m: '
            "ProfilingSessions are not reconciled and agents spool their batches "
            "on the nodes until it is back.",
            "runbook_url": RUNBOOK + "kubeprofoperatordown",
        },
    }
    return [
        # Scrapes fail from minute 10 on: pending for 4m, firing after 5m.
        {
            "interval": "1m",
            "input_series": [{"series": f'up{{job="{JOB}"}}', "values": "1x9 0x20"}],
            "alert_rule_test": [
                {"eval_time": "9m", "alertname": "KubeprofOperatorDown", "exp_alerts": []},
                {"eval_time": "14m", "alertname": "KubeprofOperatorDown", "exp_alerts": []},
                {"eval_time": "15m", "alertname": "KubeprofOperatorDown", "exp_alerts": [down]},
            ],
        },
        # Another job's target being down says nothing about the operator.
        {
            "interval": "1m",
            "input_series": [
                {"series": f'up{{job="{JOB}"}}', "values": "1x30"},
                {"series": 'up{job="other"}', "values": "0x30"},
            ],
            "alert_rule_test": [
                {"eval_time": "20m", "alertname": "KubeprofOperatorDown", "exp_alerts": []}
            ],
        },
    ]


def _ingest_tests() -> list[dict[str, Any]]:
    failing = {
        "exp_labels": {"severity": "critical", "job": JOB},
        "exp_annotations": {
            "summary": "kubeprof ingest cannot write to its database",
            "description": f"The operator (job {JOB}) refused 0.10 batches/s for database errors "
            "during the last 5m. Agents keep the batches in their spool and retry; "
            "check PostgreSQL and the operator's log.",
            "runbook_url": RUNBOOK + "kubeprofingestfailing",
        },
    }
    behind = {
        "exp_labels": {"severity": "warning", "job": JOB},
        "exp_annotations": {
            "summary": "kubeprof ingest is falling behind",
            "description": f"60 batches wait for a database writer in the operator (job {JOB}), "
            "more than 50 for 10m. Raise operator.ingestWriters or the database's "
            "resources.",
            "runbook_url": RUNBOOK + "kubeprofingestfallingbehind",
        },
    }
    rej = "kubeprof_ingest_rejections_total"
    pending = "kubeprof_ingest_pending_batches"
    return [
        # 6 database refusals a minute from the start; other refusals (a bad token) grow too.
        {
            "interval": "1m",
            "input_series": [
                {"series": f'{rej}{{job="{JOB}",reason="database"}}', "values": "0+6x30"},
                {"series": f'{rej}{{job="{JOB}",reason="forbidden"}}', "values": "0+50x30"},
            ],
            "alert_rule_test": [
                {"eval_time": "5m", "alertname": "KubeprofIngestFailing", "exp_alerts": []},
                {"eval_time": "7m", "alertname": "KubeprofIngestFailing", "exp_alerts": [failing]},
            ],
        },
        # Only refusals that are not database errors: no ingest failure alert.
        {
            "interval": "1m",
            "input_series": [
                {"series": f'{rej}{{job="{JOB}",reason="database"}}', "values": "3x30"},
                {"series": f'{rej}{{job="{JOB}",reason="session_over"}}', "values": "0+9x30"},
            ],
            "alert_rule_test": [
                {"eval_time": "20m", "alertname": "KubeprofIngestFailing", "exp_alerts": []}
            ],
        },
        # Backlog: 60 > 50 for good; exactly at 50; above for less than 10m.
        {
            "interval": "1m",
            "input_series": [{"series": f'{pending}{{job="{JOB}"}}', "values": "60x30"}],
            "alert_rule_test": [
                {"eval_time": "9m", "alertname": "KubeprofIngestFallingBehind", "exp_alerts": []},
                {
                    "eval_time": "10m",
                    "alertname": "KubeprofIngestFallingBehind",
                    "exp_alerts": [behind],
                },
            ],
        },
        {
            "interval": "1m",
            "input_series": [{"series": f'{pending}{{job="{JOB}"}}', "values": "50x30"}],
            "alert_rule_test": [
                {"eval_time": "20m", "alertname": "KubeprofIngestFallingBehind", "exp_alerts": []}
            ],
        },
        {
            "interval": "1m",
            "input_series": [{"series": f'{pending}{{job="{JOB}"}}', "values": "900x8 0x20"}],
            "alert_rule_test": [
                {"eval_time": "12m", "alertname": "KubeprofIngestFallingBehind", "exp_alerts": []}
            ],
        },
    ]


def _run_tests(promtool: Path, tmp_path: Path, rules: Path, tests: list[dict[str, Any]]):
    f = tmp_path / "tests.yaml"
    f.write_text(
        yaml.safe_dump(
            {"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests},
            sort_keys=False,
        )
    )
    return _promtool(promtool, "test", "rules", str(f))


@pytest.mark.parametrize(
    "values", [{}, {"gpuIdle": {"threshold": 0.8, "for": "3m"}}], ids=["default", "custom"]
)
def test_rules_are_valid(promtool: Path, tmp_path: Path, values):
    r = _promtool(promtool, "check", "rules", str(_rules(tmp_path, values)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 4 rules found" in r.stdout


def test_gpu_idle_alert_default_threshold_and_for(promtool: Path, tmp_path: Path):
    rules = _rules(tmp_path, {})
    r = _run_tests(promtool, tmp_path, rules, _gpu_tests(0.5, 10))
    assert r.returncode == 0, r.stdout + r.stderr


def test_gpu_idle_alert_follows_the_values(promtool: Path, tmp_path: Path):
    rules = _rules(tmp_path, {"gpuIdle": {"threshold": 0.8, "for": "3m"}})
    r = _run_tests(promtool, tmp_path, rules, _gpu_tests(0.8, 3))
    assert r.returncode == 0, r.stdout + r.stderr
    # The default-valued expectations do not hold for these values: the test can fail.
    r = _run_tests(promtool, tmp_path, rules, _gpu_tests(0.5, 10))
    assert r.returncode != 0 and "KubeprofGPUIdleRatioHigh" in r.stdout + r.stderr


def test_gpu_idle_alert_on_light_agent_series(promtool: Path, tmp_path: Path):
    r = _run_tests(promtool, tmp_path, _rules(tmp_path, {}), _light_tests())
    assert r.returncode == 0, r.stdout + r.stderr


def test_operator_down_alert(promtool: Path, tmp_path: Path):
    r = _run_tests(promtool, tmp_path, _rules(tmp_path, {}), _operator_tests())
    assert r.returncode == 0, r.stdout + r.stderr


def test_ingest_alerts(promtool: Path, tmp_path: Path):
    r = _run_tests(promtool, tmp_path, _rules(tmp_path, {}), _ingest_tests())
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_has_its_runbook_section_in_the_readme():
    docs = chart.render({"prometheusRule": {"enabled": True}})
    readme = (chart.ROOT / "README.md").read_text()
    for rule in chart.find(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]:
        name = rule["alert"]
        assert rule["annotations"]["runbook_url"] == RUNBOOK + name.lower()
        assert f"\n#### Alert: {name}\n" in readme, f"README has no runbook for {name}"


def test_a_sessions_gpu_idle_alert_resolves_when_its_series_end(promtool: Path, tmp_path: Path):
    # The operator removes a session's series when the session ends
    # (tests/unit/operator/test_op_metrics.py, test_op_reconcile.py): 0.9 idle for 20
    # minutes, then no sample (promtool's "_"), as Prometheus sees the series go.
    runbook = RUNBOOK + "kubeprofgpuidleratiohigh"
    ended = {
        "exp_labels": _idle_labels("ended", "gpu-e", "0"),
        "exp_annotations": {
            "summary": "GPU 0 on gpu-e idle 90% for pod ml/ended",
            "description": "GPU 0 on node gpu-e, used by pod ended in namespace ml, ran no "
            "kernel 90% of the time (ProfilingSession ml/train), above 0.5 for at least 10m. "
            "See the session's findings: kubectl get profilingsession -n ml train -o yaml",
            "runbook_url": runbook,
        },
    }
    light = {
        "exp_labels": _light_labels("always-on", "gpu-f", "1"),
        "exp_annotations": {
            "summary": "GPU 1 on gpu-f idle 90% for pod ml/always-on",
            "description": "GPU 1 on node gpu-f, used by pod always-on in namespace ml, ran "
            "no kernel 90% of the time (light agent, container main), above 0.5 for at least "
            "10m. Profiles a ProfilingPolicy captured for it: kubectl get profilingsessions "
            "-n ml -l kubeprof.dev/policy-pod=always-on",
            "runbook_url": runbook,
        },
    }
    tests = [
        {
            "interval": "1m",
            "input_series": [
                {"series": _idle("ended", "gpu-e", "0"), "values": "0.9x20 _x30"},
                {"series": _light("always-on", "gpu-f", "1"), "values": "0.9x50"},
            ],
            "alert_rule_test": [
                {
                    "eval_time": "15m",
                    "alertname": "KubeprofGPUIdleRatioHigh",
                    "exp_alerts": [ended, light],
                },
                # After the staleness window (5 minutes) only the light agent's pod fires.
                {
                    "eval_time": "30m",
                    "alertname": "KubeprofGPUIdleRatioHigh",
                    "exp_alerts": [light],
                },
            ],
        }
    ]
    r = _run_tests(promtool, tmp_path, _rules(tmp_path, {}), tests)
    assert r.returncode == 0, r.stdout + r.stderr
