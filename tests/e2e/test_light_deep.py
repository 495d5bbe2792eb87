"""A ProfilingSession switches the always-on light agent on node A to deep profiling, on the
real control plane (kube-apiserver + scheduler + DaemonSet controller + kwok) and Postgres.

Pods of one app run on kwok GPU nodes A, B and C. A real `kubeprof agent --light --deep`
process acts for node A (kwok has no GPU: its NVML readings are replayed, naming the real
PID of the workload process that stands in pod A's cgroup); B has no light agent; C's light
agent runs without CAP_BPF/CAP_PERFMON (dropped from its bounding set), so it cannot go
deep. The session selects all three pods. Shown: the session's DaemonSet is pinned to B and
C only, so no agent pod is scheduled on A, and the status says why C fell back; the light
agent on A runs the ordinary node agent for the session and ships real eBPF CPU samples of
pod A's process into it with the session's token; an operator killed and restarted
mid-session re-sends the same assignment and nothing starts twice; at the session's end the
light agent is back to light only (no deep session, its /metrics still served); neither
token is in a log or the status.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import socket
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import psycopg
import pytest
import yaml

from kubeprof.protocol.settings import spool_folder
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster
from tests.e2e.cluster.ports import pick

pytestmark = [pytest.mark.e2e, pytest.mark.bpf]
APP = "deep"


def _pod(name: str, ns: str, node: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": APP}},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "main", "image": "registry.invalid/trainer:0"}],
            },
        }
    )


def _metrics(url: str) -> dict[str, float]:
    """name{labels} -> value of the light agent's /metrics ({} while it is not up)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name + json.dumps(s.labels, sort_keys=True)] = float(s.value)
    return out


def _deep(url: str, node: str, name: str) -> float | None:
    return _metrics(url).get(f"kubeprof_light_deep_{name}" + json.dumps({"node": node}))


def _terms(ds: dict) -> list[list[str]]:
    terms = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    return [t["matchFields"][0]["values"] for t in terms]


def _agent_pod_nodes(c: Cluster, ns: str, session: str) -> list[str]:
    got = (
        h.get_json(
            c,
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            f"kubeprof.dev/session={session},app.kubernetes.io/component=agent",
        )
        or {}
    )
    return sorted(p["spec"].get("nodeName", "") for p in got.get("items", []))


def _light_agent(
    c: Cluster,
    node: str,
    port: int,
    replay: Path,
    operator_url: str,
    token: Path,
    work: Path,
    wrap: tuple[str, ...] = (),
) -> h.Proc:
    """A real `kubeprof agent --light --deep` acting for `node` (NVML replayed)."""
    return h._spawn(
        [
            *wrap,
            *h.KUBEPROF,
            "agent",
            "--light",
            "--node-name",
            node,
            "--listen",
            f"127.0.0.1:{port}",
            "--replay",
            str(replay),
            "--interval",
            "0.5",
            "--window",
            "2",
            "--pods-interval",
            "1",
            "--kubeconfig",
            str(c.kubeconfig),
            "--deep",
            "--operator-url",
            operator_url,
            "--token-file",
            str(token),
            "--spool-dir",
            str(work / f"spool-{node}"),
            "--heartbeat-interval",
            "1",
            "--rescan-interval",
            "1",
            "--drain-timeout",
            "60",
        ],
        {},
        work / f"light-{node}.log",
    )


def test_session_goes_deep_on_the_light_agent_and_daemonset_covers_the_rest(
    k8s_cluster: Cluster, postgres_dsn
):
    if os.geteuid() != 0:
        pytest.skip("needs root (cgroups, eBPF)")
    c = k8s_cluster
    h.apply_crd(c)
    ns, name = f"e2e-deep-{uuid.uuid4().hex[:6]}", "deep-profile"
    node_a, node_b, node_c = "kwok-gpu-0000", "kwok-gpu-0001", "kwok-gpu-0002"
    c.kubectl("create", "namespace", ns)
    work = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-deep-"))
    light_token = work / "light-token"
    light_token.write_text(secrets.token_urlsafe(32))
    light_token.chmod(0o600)
    procs: list[h.Proc] = []
    workload = None
    try:
        c.kubectl("apply", "-f", "-", stdin=_pod("trainer-a", ns, node_a))
        c.kubectl("apply", "-f", "-", stdin=_pod("trainer-b", ns, node_b))
        c.kubectl("apply", "-f", "-", stdin=_pod("trainer-c", ns, node_c))
        pods = h.poll(
            lambda: (lambda r: r if len(r) == 3 else [])(h.running_pods(c, ns, APP)),
            60,
            "the three pods Running",
        )
        uid_a = next(p["metadata"]["uid"] for p in pods if p["spec"]["nodeName"] == node_a)
        workload = h.PodProcess(uid_a, seconds=300).start()
        assert workload.popen is not None
        replay = work / "nvml.jsonl"
        replay.write_text(
            json.dumps(
                {
                    "devices": [
                        {
                            "gpu": 0,
                            "uuid": "GPU-e2e",
                            "util_gpu": 10,
                            "mem_used": 1 << 30,
                            "mem_total": 141 << 30,
                            "processes": [{"pid": workload.popen.pid, "usedGpuMemory": 1 << 30}],
                            "samples": [
                                {"pid": workload.popen.pid, "timeStamp": 1000, "smUtil": 10}
                            ],
                        }
                    ]
                }
            )
            + "\n"
        )

        op = h.Operator(
            c,
            postgres_dsn.url,
            work,
            args=(
                "--light-token-file",
                str(light_token),
                "--light-grace",
                "4",
                "--light-stale",
                "15",
            ),
        ).start()
        procs.append(op.proc)  # type: ignore[arg-type]
        (port,) = pick(1)
        metrics_url = f"http://127.0.0.1:{port}/metrics"
        light = _light_agent(c, node_a, port, replay, op.url, light_token, work)
        procs.append(light)
        # Node C's light agent lacks the capabilities to go deep (BPF, PERFMON, SYS_ADMIN
        # dropped from its bounding set): it says so, and C keeps the per-session agent.
        (port_c,) = pick(1)
        shallow = _light_agent(
            c,
            node_c,
            port_c,
            replay,
            op.url,
            light_token,
            work,
            wrap=("setpriv", "--bounding-set", "-bpf,-perfmon,-sys_admin"),
        )
        procs.append(shallow)
        assert h.poll(
            lambda: _deep(f"http://127.0.0.1:{port_c}/metrics", node_c, "capable") is not None,
            60,
            "node C's light agent up",
        ), shallow.text()[-3000:]
        assert _deep(f"http://127.0.0.1:{port_c}/metrics", node_c, "capable") == 0
        assert (
            h.poll(
                lambda: _deep(metrics_url, node_a, "capable"), 60, "the light agent deep-capable"
            )
            == 1
        ), light.text()[-3000:]

        c.kubectl("apply", "-f", "-", stdin=h.session_yaml(name, ns, APP, "60s"))
        ds = h.poll(
            lambda: h.get_json(c, "get", "ds", "-n", ns, f"kubeprof-{name}-agent"),
            60,
            "the session's DaemonSet",
        )
        assert _terms(ds) == [[node_b], [node_c]], "node A belongs to its light agent"
        token = h.session_token(c, ns, name)
        h.poll(
            lambda: _agent_pod_nodes(c, ns, name) == [node_b, node_c],
            60,
            "agent pods on B and C only",
        )
        assert h.poll(
            lambda: _deep(metrics_url, node_a, "sessions") == 1,
            60,
            "the light agent running the session deeply",
        ), light.text()[-3000:]

        def light_running() -> dict:
            st = h.session(c, ns, name).get("status") or {}
            return st if (st.get("lightAgents") or {}).get("running") == 1 else {}

        st = h.poll(light_running, 30, "status counting the light agent")
        assert st["lightAgents"] == {"nodes": 1, "running": 1, "fallbackNodes": 1}
        assert st["agents"]["expected"] == 3 and st["phase"] == "Running"
        cond = {x["type"]: x for x in st["conditions"]}["LightAgents"]
        assert (cond["status"], cond["reason"]) == ("False", "FellBack"), cond
        assert node_c in cond["message"] and "CAP_BPF" in cond["message"], cond

        # Operator killed and restarted mid-session: the light agent keeps profiling; the
        # assignment re-sent afterwards starts nothing new; A still gets no agent pod.
        time.sleep(5)
        op.kill()
        time.sleep(3)
        op = h.Operator(c, postgres_dsn.url, work, port=op.port, args=op.args).start()
        procs.append(op.proc)  # type: ignore[arg-type]
        time.sleep(8)  # past the restarted operator's grace: placement is decided again
        assert _agent_pod_nodes(c, ns, name) == [node_b, node_c]
        assert _deep(metrics_url, node_a, "sessions") == 1

        h.poll(lambda: h.phase(c, ns, name) == "Completed", 150, "phase Completed")
        assert h.poll(
            lambda: _deep(metrics_url, node_a, "sessions") == 0,
            90,
            "the light agent back to light only",
        ), light.text()[-3000:]
        assert light.alive(), light.text()[-3000:]
        after = _metrics(metrics_url)
        assert any(k.startswith("kubeprof_gpu_device_utilization_ratio") for k in after)
        st = h.session(c, ns, name)["status"]
    finally:
        if workload is not None:
            workload.stop()
        for p in reversed(procs):
            p.stop()
        c.kubectl("delete", "namespace", ns, "--wait=false", check=False)

    log = (work / f"light-{node_a}.log").read_text()
    starts = re.findall(rf"deep: profiling session {ns}/{name} on node {node_a}", log)
    assert len(starts) == 1, log[-3000:]  # once, across the operator's restart
    assert f"deep: session {ns}/{name} finished on this node" in log
    for f in work.glob("*.log"):
        text = f.read_text(errors="replace")
        assert light_token.read_text() not in text, f
        assert token not in text, f
    assert token not in json.dumps(st)

    # Real eBPF samples of the pod A's process, shipped by the light agent from node A.
    assert st["samples"] > 20, st
    assert any("kubeprof_e2e" in s for s in st["topStacks"]), st["topStacks"]
    with psycopg.connect(postgres_dsn.libpq) as conn:
        sid = conn.execute(
            "SELECT id FROM sessions WHERE name = %s", (st["storeSession"],)
        ).fetchone()[0]
        procs_a = conn.execute(
            "SELECT DISTINCT pod_uid, container_id FROM processes WHERE session_id = %s "
            "AND node = %s",
            (sid, node_a),
        ).fetchall()
        assert (uid_a, workload.container_id) in procs_a, procs_a
        n = conn.execute(
            "SELECT count(*) FROM samples WHERE session_id = %s AND node = %s", (sid, node_a)
        ).fetchone()[0]
        assert n > 20
    print(f"\nlogs: {work}; {n} samples from {node_a} by its light agent")


class Link:
    """A TCP forwarder from a local port to the operator that can be cut: the network
    between one node's light agent and the operator, as a partition would break it."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()  # cut() may race an accept: no socket outlives it
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.server.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(("127.0.0.1", self.upstream), timeout=10)
            except OSError:
                down.close()
                return
            with self.lock:
                if self.closed:
                    down.close()
                    up.close()
                    return
                self.socks += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def cut(self) -> None:
        self.server.close()
        with self.lock:
            self.closed = True
        for sock in self.socks:
            with contextlib.suppress(OSError):
                sock.close()


def test_a_light_agent_that_dies_falls_back_to_the_daemonset_and_nothing_is_lost(
    k8s_cluster: Cluster, postgres_dsn
):
    """Node A's light agent is cut off from the operator mid-session (its batches pile up
    in its spool), then killed (SIGKILL). After --light-stale the operator pins the
    session's DaemonSet to A and the status says why; the per-session agent there (a real
    `kubeprof agent`, as its pod would run it, on the node's same spool root) ships every
    batch the light agent left behind."""
    if os.geteuid() != 0:
        pytest.skip("needs root (cgroups, eBPF)")
    c = k8s_cluster
    h.apply_crd(c)
    ns, name, node_a = f"e2e-deepfb-{uuid.uuid4().hex[:6]}", "deep-fallback", "kwok-gpu-0003"
    c.kubectl("create", "namespace", ns)
    work = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-deepfb-"))
    light_token = work / "light-token"
    light_token.write_text(secrets.token_urlsafe(32))
    procs: list[h.Proc] = []
    workload = None
    left_ids: set[str] = set()
    try:
        c.kubectl("apply", "-f", "-", stdin=_pod("trainer-a", ns, node_a))
        (pod,) = h.poll(lambda: h.running_pods(c, ns, APP), 60, "pod Running")
        workload = h.PodProcess(pod["metadata"]["uid"], seconds=300).start()
        replay = work / "nvml.jsonl"
        replay.write_text('{"devices": []}\n')
        op = h.Operator(
            c,
            postgres_dsn.url,
            work,
            args=(
                "--light-token-file",
                str(light_token),
                "--light-grace",
                "3",
                "--light-stale",
                "8",
            ),
        ).start()
        procs.append(op.proc)  # type: ignore[arg-type]
        link = Link(op.port)
        (port,) = pick(1)
        metrics_url = f"http://127.0.0.1:{port}/metrics"
        light = _light_agent(
            c, node_a, port, replay, f"http://127.0.0.1:{link.port}", light_token, work
        )
        procs.append(light)
        h.poll(lambda: _deep(metrics_url, node_a, "capable") == 1, 60, "light agent up")
        c.kubectl("apply", "-f", "-", stdin=h.session_yaml(name, ns, APP, "120s"))
        token = h.session_token(c, ns, name)
        h.poll(lambda: _deep(metrics_url, node_a, "sessions") == 1, 60, "light agent deep")
        store = h.poll(
            lambda: (h.session(c, ns, name).get("status") or {}).get("storeSession"),
            30,
            "the store session",
        )

        def stored_batches() -> set[str]:
            with psycopg.connect(postgres_dsn.libpq) as conn:
                return {
                    r[0]
                    for r in conn.execute(
                        "SELECT b.batch_id FROM ingested_batches b JOIN sessions s "
                        "ON s.id = b.session_id WHERE s.name = %s",
                        (store,),
                    )
                }

        h.poll(lambda: len(stored_batches()) >= 3, 90, "the light agent's first batches")
        assert not h.get_json(c, "get", "ds", "-n", ns, f"kubeprof-{name}-agent")

        # Cut off: its batches pile up in its spool; then it dies without a word.
        link.cut()
        uid = h.session(c, ns, name)["metadata"]["uid"]
        spool = work / f"spool-{node_a}" / spool_folder(ns, name, uid)
        h.poll(lambda: len(list(spool.glob("*.batch.gz"))) >= 3, 30, "batches spooled")
        light.kill()
        left_ids = {
            p.name.split("-", 1)[1].removesuffix(".batch.gz") for p in spool.glob("*.batch.gz")
        }
        # (A batch stored just as the link broke may be among them: its answer was lost,
        # so it is sent again and counted as a duplicate; the rest are stored nowhere yet.)
        assert left_ids - stored_batches(), left_ids

        ds = h.poll(
            lambda: h.get_json(c, "get", "ds", "-n", ns, f"kubeprof-{name}-agent"),
            60,
            "the DaemonSet taking node A over",
        )
        assert _terms(ds) == [[node_a]]
        # What that DaemonSet's pod runs, on the node's same spool root (started at once:
        # the session must still take data when it ships the light agent's leftovers).
        agent = h.start_agent(op, ns, name, node_a, token, work, uid=uid)
        procs.append(agent)
        h.poll(lambda: _agent_pod_nodes(c, ns, name) == [node_a], 60, "an agent pod on A")
        st = h.session(c, ns, name)["status"]
        assert st["phase"] == "Running", st["phase"]
        msg = {x["type"]: x for x in st["conditions"]}["LightAgents"]["message"]
        assert node_a in msg and "light agent not heard from" in msg, msg
        assert st["lightAgents"] == {"nodes": 0, "running": 0, "fallbackNodes": 1}

        h.poll(lambda: h.phase(c, ns, name) == "Completed", 150, "phase Completed")
        assert agent.popen.wait(60) == 0, agent.text()[-3000:]
        missing = left_ids - stored_batches()
        assert not missing, f"batches the light agent left, not stored: {missing}"
        assert not list(spool.glob("*.batch.gz"))
        st = h.session(c, ns, name)["status"]
        assert st["samples"] > 20 and any("kubeprof_e2e" in s for s in st["topStacks"]), st
    finally:
        if workload is not None:
            workload.stop()
        for p in reversed(procs):
            p.stop()
        c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    print(f"\nlogs: {work}; {len(left_ids)} batches left by the dead light agent, all stored")
