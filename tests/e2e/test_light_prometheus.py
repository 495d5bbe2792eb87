"""A real Prometheus (Debian's package) scrapes the light agents, and the chart's own
KubeprofGPUIdleRatioHigh rule, taken from the rendered PrometheusRule, fires for the idle
pod and not for the busy one: the alert exists for every GPU pod without any session.

As in test_light_policy.py, kwok nodes have no GPU: the light agents replay NVML-shaped
readings (synthesized) for real pods scheduled on kwok nodes.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeprof.agent.cluster.cgroups import cgroup_name
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster
from tests.e2e.cluster.ports import pick
from tests.e2e.test_light_policy import PIDS, _deployment, _readings
from tests.e2e.test_prometheus_alerts import JOB, Prometheus
from tests.support import chart
from tests.support.chart import helm_built  # noqa: F401 - the fixture

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("helm_built")]


def test_prometheus_scrapes_light_agents_and_chart_alert_fires(k8s_cluster: Cluster):
    c = k8s_cluster
    ns = f"e2e-lprom-{uuid.uuid4().hex[:6]}"
    c.kubectl("create", "namespace", ns)
    work = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-lprom-"))
    agents: list[h.Proc] = []
    prom = None
    try:
        apps = ("idle", "busy")
        # Both pods on one kwok GPU node: one light agent, one scrape target.
        node = h.get_json(c, "get", "nodes", "-l", "nvidia.com/gpu.present=true")["items"][0]
        for app in apps:
            doc = yaml.safe_load(_deployment(app, ns))
            doc["spec"]["template"]["spec"]["nodeName"] = node["metadata"]["name"]
            c.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(doc))
        pods = {
            a: h.poll(lambda a=a: h.running_pods(c, ns, a), 90, f"{a} running")[0] for a in apps
        }
        proc = work / "proc"
        for app in apps:
            (proc / str(PIDS[app])).mkdir(parents=True)
            cid = uuid.uuid4().hex + uuid.uuid4().hex
            (proc / str(PIDS[app]) / "cgroup").write_text(
                f"0::/{cgroup_name(pods[app]['metadata']['uid'], cid)}\n"
            )
        (work / "readings.jsonl").write_text(_readings(64))
        targets = []
        for node in sorted({p["spec"]["nodeName"] for p in pods.values()}):
            (port,) = pick(1)
            targets.append(f"127.0.0.1:{port}")
            agents.append(
                h._spawn(
                    [
                        *h.KUBEPROF,
                        "agent",
                        "--light",
                        "--node-name",
                        node,
                        "--listen",
                        f"127.0.0.1:{port}",
                        "--replay",
                        str(work / "readings.jsonl"),
                        "--proc-root",
                        str(proc),
                        "--interval",
                        "0.5",
                        "--window",
                        "5",
                        "--pods-interval",
                        "1",
                        "--kubeconfig",
                        str(c.kubeconfig),
                    ],
                    {},
                    work / f"light-{node}.log",
                )
            )
        docs = chart.render(
            {
                "prometheusRule": {
                    "enabled": True,
                    "job": JOB,
                    "gpuIdle": {"threshold": 0.5, "for": "3s"},
                }
            }
        )
        rules = chart.rules_file(docs, work / "rules.yaml")
        prom = Prometheus(work, targets[0], rules)
        idle_pod = pods["idle"]["metadata"]["name"]

        def firing() -> list[dict[str, Any]]:
            for a in agents:
                assert a.alive(), a.text()[-2000:]
            return [
                a
                for a in prom.api("alerts")["alerts"]
                if a["labels"]["alertname"] == "KubeprofGPUIdleRatioHigh" and a["state"] == "firing"
            ]

        alerts = h.poll(firing, 90, "KubeprofGPUIdleRatioHigh firing on the light agent")
        series = {
            s["metric"]["pod"]: float(s["value"][1])
            for s in prom.query(f'kubeprof_gpu_idle_ratio{{namespace="{ns}"}}')
        }
        assert series.get(idle_pod) == pytest.approx(0.95)
        assert series.get(pods["busy"]["metadata"]["name"]) == pytest.approx(0.10)
        assert [a["labels"]["pod"] for a in alerts] == [idle_pod]  # not the busy pod
        a = alerts[0]["labels"]
        assert (a["namespace"], a["node"], a["gpu"]) == (ns, pods["idle"]["spec"]["nodeName"], "0")
        # No session behind a light agent's series: the description says whose it is.
        desc = alerts[0]["annotations"]["description"]
        assert f"used by pod {idle_pod} in namespace {ns}" in desc, desc
        assert "(light agent, container " in desc and "ProfilingSession" not in desc, desc
    finally:
        if prom is not None:
            prom.stop()
        for a in agents:
            a.stop()
        c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        print(f"\nlogs: {work}")
