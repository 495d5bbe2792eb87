"""A real Prometheus (Debian's package) scrapes the real operator during a session, and the
chart's own alert rule, taken from the rendered PrometheusRule, fires for the session's
idle GPU and not for its busy one.

The session is the product's main path (real agent, workload in the pod's cgroup on a kwok
GPU node); kwok nodes have no GPU, so what NVML would read on that node is delivered through
the same ingest API and token, as in test_operator.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeprof.agent.cluster.client import IngestClient
from kubeprof.model import Batch, GpuMetricSample
from kubeprof.protocol.codec import encode
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster, processes
from tests.e2e.cluster.ports import pick
from tests.support import chart
from tests.support.chart import helm_built  # noqa: F401 - the fixture

pytestmark = [pytest.mark.e2e, pytest.mark.bpf, pytest.mark.usefixtures("helm_built")]
NS = "e2e-prom"
NAME = "idle-trainer"
JOB = "kubeprof-e2e"


@pytest.fixture(scope="module")
def workdir():
    d = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-prom-"))
    yield d
    print(f"\nprometheus e2e logs: {d}")


@pytest.fixture(scope="module")
def operator(k8s_cluster: Cluster, postgres_dsn, workdir: Path):
    import os

    if os.geteuid() != 0:
        pytest.skip("needs root (cgroups, eBPF)")
    h.apply_crd(k8s_cluster)
    op = h.Operator(k8s_cluster, postgres_dsn.url, workdir / "operator").start()
    yield op
    op.stop()


class Prometheus:
    """`prometheus` on a free port scraping the operator every second; stopped by its PID."""

    def __init__(self, workdir: Path, target: str, rules: Path) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus not found: run make setup (installs Debian's prometheus)")
        self.port = pick(1)[0]
        cfg = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "scrape_configs": [
                {"job_name": JOB, "honor_labels": True, "static_configs": [{"targets": [target]}]}
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(cfg))
        self.log = workdir / "prometheus.log"
        with self.log.open("ab") as out:  # the child keeps its own copy of the descriptor
            self.popen = subprocess.Popen(
                processes.dies_with_parent(
                    [
                        binary,
                        f"--config.file={workdir / 'prometheus.yml'}",
                        f"--storage.tsdb.path={workdir / 'tsdb'}",
                        f"--web.listen-address=127.0.0.1:{self.port}",
                    ]
                ),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        h.poll(self._ready, 60, "prometheus ready")

    def _ready(self) -> bool:
        if self.popen.poll() is not None:
            raise AssertionError(f"prometheus exited:\n{self.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.api("query", query=expr)["result"]

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


def test_prometheus_scrapes_the_session_and_the_chart_alert_fires(
    k8s_cluster: Cluster, operator: h.Operator, workdir: Path
):
    c = k8s_cluster
    # The chart's rule exactly as rendered, with a short `for` so the test need not wait 10m.
    docs = chart.render(
        {
            "prometheusRule": {
                "enabled": True,
                "job": JOB,
                "gpuIdle": {"threshold": 0.5, "for": "3s"},
            }
        }
    )
    rules = chart.rules_file(docs, workdir / "rules.yaml")
    prom = Prometheus(workdir, f"127.0.0.1:{operator.port}", rules)
    p = None
    try:
        p = h.start_profiled(c, operator, NS, NAME, "60s", workdir)
        pod = h.running_pods(c, NS, NAME)[0]["metadata"]["name"]
        token = h.session_token(c, NS, NAME)
        pid = p.workload.popen.pid
        # GPU 0: 25 % busy (idle 0.75, above the threshold); GPU 1: 90 % busy (idle 0.10).
        # On this host's CLOCK_MONOTONIC, as NVML's readings are: a node's records must fit
        # in the session's span (kubeprof.protocol.bounds).
        t = time.monotonic_ns()
        nvml = Batch(
            gpu_metrics=(
                GpuMetricSample(t + 1, 0, "gpu_util_pct", 20.0),
                GpuMetricSample(t + 2, 0, "gpu_util_pct", 30.0),
                GpuMetricSample(t + 2, 0, "proc_sm_util_pct", 25.0, pid=pid),
                GpuMetricSample(t + 1, 1, "gpu_util_pct", 90.0),
                GpuMetricSample(t + 2, 1, "gpu_util_pct", 90.0),
                GpuMetricSample(t + 2, 1, "proc_sm_util_pct", 90.0, pid=pid),
            )
        )
        ans = IngestClient(operator.url, NS, NAME, token).post_batch(
            encode(nvml, batch_id=f"{p.node}-nvml-1", node=p.node), f"{p.node}-nvml-1"
        )
        assert ans.status == 200, ans

        sel = f'kubeprof_gpu_idle_ratio{{namespace="{NS}",session="{NAME}"}}'

        def both_with_pod() -> list[dict[str, Any]]:
            # The pod label appears once the agent has reported the workload's process.
            got = prom.query(sel)
            return got if len(got) == 2 and all(s["metric"].get("pod") for s in got) else []

        series = h.poll(both_with_pod, 90, "both GPUs' idle ratio, with the pod, in Prometheus")
        assert h.phase(c, NS, NAME) == "Running", "scraped while the session runs"
        got = {s["metric"]["gpu"]: (s["metric"], float(s["value"][1])) for s in series}
        assert got["0"][1] == pytest.approx(0.75) and got["1"][1] == pytest.approx(0.10)
        assert got["0"][0]["pod"] == pod and got["0"][0]["node"] == p.node
        assert got["0"][0]["namespace"] == NS and got["0"][0]["session_namespace"] == NS
        assert got["0"][0]["job"] == JOB

        def firing() -> list[dict[str, Any]]:
            alerts = prom.api("alerts")["alerts"]
            return [
                a
                for a in alerts
                if a["labels"]["alertname"] == "KubeprofGPUIdleRatioHigh"
                and a["state"] == "firing"
                and a["labels"].get("pod")
            ]

        alerts = h.poll(firing, 60, "KubeprofGPUIdleRatioHigh firing")
        assert h.phase(c, NS, NAME) == "Running", "the alert fired while the session runs"
        assert len(alerts) == 1, alerts  # GPU 1 (idle 0.10) does not fire
        assert not [a for a in prom.api("alerts")["alerts"] if a["labels"].get("gpu") == "1"]
        a = alerts[0]
        assert {
            k: a["labels"][k]
            for k in ("namespace", "pod", "node", "gpu", "session_namespace", "session", "severity")
        } == {
            "namespace": NS,
            "pod": pod,
            "session_namespace": NS,
            "node": p.node,
            "gpu": "0",
            "session": NAME,
            "severity": "warning",
        }
        assert float(a["value"]) == pytest.approx(0.75)
        desc = a["annotations"]["description"]
        assert desc.startswith(
            f"GPU 0 on node {p.node}, used by pod {pod} in namespace "
            f"{NS}, ran no kernel 75% of the time (ProfilingSession {NS}/{NAME})"
        ), desc
        assert a["annotations"]["runbook_url"].endswith("#alert-kubeprofgpuidleratiohigh")
        # The operator-down rule, loaded alongside, stays silent while scrapes succeed.
        assert prom.query('ALERTS{alertname="KubeprofOperatorDown"}') == []
    finally:
        prom.stop()
        if p is not None:
            p.stop()
        h.delete_session(c, NS, NAME)
        c.kubectl("delete", "deployment", "-n", NS, NAME, "--wait=false", check=False)
