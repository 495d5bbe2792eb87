"""A kernelTracing session on an injected pod, end to end on the real control plane and
PostgreSQL: the tracer's refusal reaches the session's status.

The real `kubeprof operator` serves the injection webhook (registered by URL with its own
CA) and reconciles sessions. A Deployment in an opted-in namespace gets its pod injected by
the API server; the session's agent DaemonSet comes back with the node's rx/ folder and its
own receiver. Then, as the kubelet and the container runtime would:

* the pod's process runs in the pod's kubelet-named cgroup and its own mount namespace,
  with the injected container environment, its emptyDir at /run/kubeprof/ctl and the node's
  rx/ folder read-only at /run/kubeprof/rx (the tracer code comes from this checkout
  instead of the init container's copy);
* a real `kubeprof agent` runs with the DaemonSet's environment and the rx/ folder at
  /run/kubeprof/rx in its own mount namespace.

This machine has no GPU, so the dormant tracer refuses the agent's ``on`` with its real
reason: the pod's log line and `.status.gpuTracers` carry the same words, the KernelTracing
condition says TracersRefused, and the workload runs on to its end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from kubeprof.agent.gpu.inject import package_roots, site_dir
from kubeprof.operator.webhook import LABEL
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster, processes
from tests.e2e.cluster.ports import pick
from tests.e2e.test_injection_webhook import make_certs, webhook_config

pytestmark = pytest.mark.e2e
NAME = "traced"
WORK = """
import sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    time.sleep(0.05)
print("workload done", flush=True)
"""


def mounted(binds: list[tuple[Path, str, bool]], argv: list[str]) -> list[str]:
    """`argv` in a private mount namespace with a fresh /run holding `binds`."""
    steps = ["mount -t tmpfs kubeprof-run /run"]
    for src, dst, ro in binds:
        steps += [f"mkdir -p {dst}", f"mount --bind {src} {dst}"]
        if ro:
            steps.append(f"mount -o remount,bind,ro {dst}")
    script = " && ".join([*steps, 'exec "$@"'])
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv]


@pytest.fixture
def node_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="kp-node-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def webhook_operator(
    k8s_cluster: Cluster, postgres_dsn, node_dir: Path
) -> Iterator[tuple[h.Operator, str]]:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare (pod cgroups, mount namespaces)")
    h.apply_crd(k8s_cluster)
    ca, crt, key = make_certs(node_dir)
    port = pick(1)[0]
    op = h.Operator(
        k8s_cluster,
        postgres_dsn.url,
        node_dir,
        args=(
            "--webhook-listen",
            f"127.0.0.1:{port}",
            "--webhook-tls-cert",
            str(crt),
            "--webhook-tls-key",
            str(key),
            "--webhook-socket-host-path",
            str(node_dir / "host"),
        ),
    ).start()
    hook = f"kubeprof-inject-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("create", "-f", "-", stdin=webhook_config(hook, port, ca))
    yield op, hook
    k8s_cluster.kubectl("delete", "mutatingwebhookconfiguration", hook, check=False)
    op.stop()


def test_refusing_tracer_reaches_the_sessions_status(
    k8s_cluster: Cluster, postgres_dsn, webhook_operator, node_dir: Path
) -> None:
    op, _ = webhook_operator
    c = k8s_cluster
    ns = f"e2e-traced-{uuid.uuid4().hex[:6]}"
    c.kubectl("create", "namespace", ns)
    c.kubectl("label", "namespace", ns, f"{LABEL}=true")
    app = "trainer"
    workload = agent = None
    try:
        # The webhook configuration takes a moment to be in force: re-create until injected.
        def injected_pod() -> dict | None:
            c.kubectl("apply", "-f", "-", stdin=h.deployment_yaml(app, ns))
            pods = h.running_pods(c, ns, app)
            if pods and pods[0]["spec"].get("initContainers"):
                return pods[0]
            if pods:  # created before the webhook was in force: make another
                c.kubectl("delete", "pod", "-n", ns, pods[0]["metadata"]["name"], check=False)
            return None

        pod = h.poll(injected_pod, 90, "an injected trainer pod Running")
        uid, node = pod["metadata"]["uid"], pod["spec"]["nodeName"]
        main = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value", uid) for e in main["env"]}  # valueFrom: the pod uid
        assert env["KUBEPROF_GPU_CTL_DIR"] == "/run/kubeprof/ctl"
        assert env["KUBEPROF_GPU_SOCKET"] == "/run/kubeprof/rx/gpu.sock"

        c.kubectl(
            "apply",
            "-f",
            "-",
            stdin=h.session_yaml(
                NAME,
                ns,
                app,
                duration="30s",
                profilers={"gpu": {"enabled": True, "kernelTracing": True}},
            ),
        )
        h.poll(lambda: h.phase(c, ns, NAME) == "Running", 60, "phase Running")
        session_uid = h.session(c, ns, NAME)["metadata"]["uid"]
        ds = h.poll(
            lambda: h.get_json(c, "get", "ds", "-n", ns, f"kubeprof-{NAME}-agent"),
            30,
            "agent DaemonSet",
        )
        spec = ds["spec"]["template"]["spec"]
        vols = {v["name"]: v for v in spec["volumes"]}
        rx_host = vols["gpu-rx"]["hostPath"]["path"]
        assert rx_host == str(node_dir / "host" / "rx")
        ds_env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
        assert ds_env["KUBEPROF_AGENT_GPU_SOCKET"] == f"/run/kubeprof/rx/{session_uid}.sock"
        Path(rx_host).mkdir(parents=True, exist_ok=True)  # the kubelet: DirectoryOrCreate
        empty = node_dir / "pod-emptydir"
        empty.mkdir(mode=0o777)
        empty.chmod(0o777)

        # The pod's process: its cgroup, its mounts, the injected env (tracer from here).
        pod_env = {**env, "PYTHONPATH": os.pathsep.join([site_dir(), *package_roots()])}
        del pod_env["KUBEPROF_GPU_BUNDLE"]  # no init container copy here: this checkout
        proc = h.PodProcess(uid, seconds=60)
        proc.cgroup.mkdir(parents=True, exist_ok=True)
        argv = mounted(
            [(empty, "/run/kubeprof/ctl", False), (Path(rx_host), "/run/kubeprof/rx", True)],
            [sys.executable, "-c", WORK, "50"],
        )
        script = f'echo $$ > {proc.cgroup}/cgroup.procs && exec "$@"'
        log = node_dir / "pod.log"
        with open(log, "wb") as fh:
            popen = subprocess.Popen(
                processes.dies_with_parent(["sh", "-c", script, "sh", *argv]),
                stdout=fh,
                stderr=subprocess.STDOUT,
                env={"PATH": os.environ["PATH"], **pod_env},
            )
        proc.popen = popen  # type: ignore[assignment]
        workload = proc
        h.poll(lambda: list(empty.glob("*.sock")), 30, "the dormant tracer's control socket")

        token = h.session_token(c, ns, NAME)
        token_file = node_dir / "token"
        token_file.write_text(token)
        token_file.chmod(0o600)
        agent_env = {
            "NODE_NAME": node,
            "KUBEPROF_INGEST_URL": op.url,
            "KUBEPROF_SESSION_NAMESPACE": ns,
            "KUBEPROF_SESSION": NAME,
            "KUBEPROF_TOKEN_FILE": str(token_file),
            "KUBEPROF_SPOOL_DIR": str(node_dir / "spool"),
            "KUBEPROF_RESCAN_INTERVAL_S": "1",
            "KUBEPROF_POLL_INTERVAL_S": "0.5",
            "KUBEPROF_DRAIN_TIMEOUT_S": "60",
            "KUBEPROF_AGENT_GPU_SOCKET": ds_env["KUBEPROF_AGENT_GPU_SOCKET"],
            "KUBEPROF_AGENT_GPU_CTL_DIR": ds_env["KUBEPROF_AGENT_GPU_CTL_DIR"],
        }
        agent = h._spawn(
            mounted(
                [(Path(rx_host), "/run/kubeprof/rx", False)],
                [*h.KUBEPROF, "agent", "--collectors", "gpu"],
            ),
            agent_env,
            node_dir / "agent.log",
        )
        h.poll(lambda: h.phase(c, ns, NAME) == "Completed", 150, "phase Completed")
        assert agent.popen.wait(60) == 0, agent.text()[-3000:]
        assert popen.wait(90) == 0, log.read_text()[-3000:]  # the workload ran on to its end
    finally:
        if workload is not None:
            workload.stop()
        if agent is not None and agent.alive():
            agent.stop()
        if sys.exc_info()[0] is not None:
            c.kubectl("delete", "namespace", ns, "--wait=false", check=False)

    pod_log = log.read_text()
    assert "workload done" in pod_log, pod_log
    said = [
        ln.split("GPU tracing unavailable: ", 1)[1]
        for ln in pod_log.splitlines()
        if "GPU tracing unavailable: " in ln
    ]
    assert len(said) == 1, pod_log  # said once in the pod's log ...
    st = h.session(c, ns, NAME)["status"]
    # ... and the same words in the session's status
    assert st["gpuTracers"] == {
        "traced": 0,
        "refused": 1,
        "pods": [
            {
                "pod": f"{ns}/{pod['metadata']['name']}",
                "traced": 0,
                "refused": 1,
                "reasons": [said[0]],
            }
        ],
    }, st
    cond = {x["type"]: x for x in st["conditions"]}["KernelTracing"]
    assert (cond["status"], cond["reason"]) == ("False", "TracersRefused"), cond
    assert said[0] in cond["message"]
    assert "tracer on" not in agent.text() and "cannot trace" in agent.text()
    with psycopg.connect(postgres_dsn.libpq) as conn:
        sid = conn.execute(
            "SELECT id FROM sessions WHERE name = %s", (st["storeSession"],)
        ).fetchone()[0]
        rows = conn.execute(
            "SELECT node, pod_uid, pid, state FROM gpu_tracers WHERE session_id = %s", (sid,)
        ).fetchall()
    assert rows == [(node, uid, popen.pid, "refused")], rows  # the host pid, by SO_PEERCRED
    c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
