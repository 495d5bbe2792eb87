"""Helpers for the operator e2e tests: real `kubeprof operator` / `kubeprof agent` processes,
a workload process placed in a kubelet-named pod cgroup, and polling.

Every process started here is stopped by its own PID; every cgroup made here is removed.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.e2e import chart_cluster
from tests.e2e.cluster import Cluster, processes
from tests.e2e.cluster.ports import pick

ROOT = Path(__file__).resolve().parents[2]
# The API server's RBAC refusal ('User "..." cannot VERB resource "R"'), and kopf's own
# fallback after a refused watch ("Not enough permissions"). kopf logs a refused call and
# carries on, so a test would not notice it otherwise. (Other 403s, such as a namespace
# being terminated, are not about the rules.)
REFUSED = re.compile(r'.*cannot \w+ resource ".*|.*Not enough permissions.*')
KUBEPROF = [sys.executable, "-m", "kubeprof.cli"]
CRD = ROOT / "crds" / "profilingsession.yaml"
EXAMPLE = ROOT / "examples" / "profilingsession.yaml"

# The workload standing for a pod's container: distinctive Python function names, on CPU
# half the time (20 ms bursts, 20 ms sleeps). Spinning all the time, these stand-ins took
# ~160 of the xdist tier's ~650 sampled CPU-seconds on this 2-core machine (2026-12-06);
# every test needs only a few dozen of its samples (~50 a second at 99 Hz).
WORKLOAD = """
import sys, time
def kubeprof_e2e_inner(n):
    t = 0
    for i in range(n):
        t += i * i % 7
    return t
def kubeprof_e2e_hot():
    return kubeprof_e2e_inner(50_000)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    burst = time.monotonic() + 0.02
    while time.monotonic() < burst:
        kubeprof_e2e_hot()
    time.sleep(0.02)
"""


def poll(fn: Callable[[], Any], timeout: float, what: str, interval: float = 0.5) -> Any:
    """Call fn until it returns something truthy; fail naming `what` and the last value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def apply_crd(cluster: Cluster) -> None:
    cluster.kubectl("apply", "-f", str(CRD))
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/profilingsessions.kubeprof.dev"
    )


def session_yaml(name: str, namespace: str, app: str, duration: str = "30s", **spec: Any) -> str:
    """A ProfilingSession selecting app=<app> in `namespace` on GPU nodes."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"]["target"]["namespace"] = namespace
    doc["spec"]["target"]["podSelector"] = {"matchLabels": {"app": app}}
    doc["spec"]["duration"] = duration
    doc["spec"].update(spec)
    return yaml.safe_dump(doc)


def deployment_yaml(name: str, namespace: str, replicas: int = 1) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "nodeSelector": {"nvidia.com/gpu.present": "true"},
                        "containers": [{"name": "main", "image": "registry.invalid/trainer:0"}],
                    },
                },
            },
        }
    )


def get_json(cluster: Cluster, *args: str) -> Any:
    r = cluster.kubectl(*args, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def session(cluster: Cluster, namespace: str, name: str) -> dict:
    return get_json(cluster, "get", "profilingsession", "-n", namespace, name) or {}


def phase(cluster: Cluster, namespace: str, name: str) -> str:
    return (session(cluster, namespace, name).get("status") or {}).get("phase", "")


def running_pods(cluster: Cluster, namespace: str, app: str) -> list[dict]:
    pods = get_json(cluster, "get", "pods", "-n", namespace, "-l", f"app={app}") or {}
    return [p for p in pods.get("items", []) if p["status"].get("phase") == "Running"]


def deployed_node(cluster: Cluster, namespace: str, app: str) -> str:
    """Deploy one pod of `app` in `namespace`; the node it runs on, once it is Running."""
    cluster.kubectl("apply", "-f", "-", stdin=deployment_yaml(app, namespace))
    pod = poll(lambda: running_pods(cluster, namespace, app), 60, f"{app} pod Running")[0]
    return str(pod["spec"]["nodeName"])


def running_session(cluster: Cluster, namespace: str, name: str, duration: str) -> tuple[str, str]:
    """One `trainer` pod and a session `name` selecting it; once the session is Running,
    the pod's node and the session's agent token."""
    node = deployed_node(cluster, namespace, "trainer")
    cluster.kubectl("apply", "-f", "-", stdin=session_yaml(name, namespace, "trainer", duration))
    poll(lambda: phase(cluster, namespace, name) == "Running", 60, f"{name} Running")
    return node, session_token(cluster, namespace, name)


def session_token(cluster: Cluster, namespace: str, name: str) -> str:
    sec = poll(
        lambda: get_json(cluster, "get", "secret", "-n", namespace, f"kubeprof-{name}-ingest"),
        60,
        f"Secret of {name}",
    )
    return base64.b64decode(sec["data"]["token"]).decode()


def _session_rows(libpq: str, namespace: str, session: str, select_from: str) -> list[tuple]:
    """Rows of `SELECT ... FROM <table> x` joined to the session `namespace/session` (any
    of its incarnations) through `x.session_id`."""
    import psycopg

    with psycopg.connect(libpq) as conn:
        return conn.execute(
            f"{select_from} JOIN sessions s ON s.id = x.session_id WHERE s.name LIKE %s",
            (f"{namespace}/{session}@%",),
        ).fetchall()


def stored_batch_ids(libpq: str, namespace: str, session: str) -> set[str]:
    """Batch ids stored for the session `namespace/session` (any of its incarnations)."""
    rows = _session_rows(libpq, namespace, session, "SELECT x.batch_id FROM ingested_batches x")
    return {str(r[0]) for r in rows}


def stored_pod_claims(libpq: str, namespace: str, session: str) -> dict[tuple[str, int], str]:
    """(node, pid) -> the pod UID each stored process record of the session names."""
    q = "SELECT x.node, x.pid, x.pod_uid FROM processes x"
    return {(str(r[0]), int(r[1])): str(r[2]) for r in _session_rows(libpq, namespace, session, q)}


def delete_session(cluster: Cluster, namespace: str, name: str) -> None:
    cluster.kubectl(
        "delete", "profilingsession", "-n", namespace, name, "--wait=false", check=False
    )


@dataclass
class Proc:
    """A child process with its log file; stop() is SIGTERM then SIGKILL, by PID."""

    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 30) -> int:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                return self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
        return self.popen.wait(10)

    def kill(self) -> None:
        if self.alive():
            self.popen.kill()
        self.popen.wait(10)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> Proc:
    log.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    with open(log, "ab") as fh:  # the child writes to its own copy of the descriptor
        popen = subprocess.Popen(
            processes.dies_with_parent(argv),
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=ROOT,
        )
    return Proc(popen, log)


@dataclass
class Operator:
    """A `kubeprof operator` subprocess on a free port."""

    cluster: Cluster
    database_url: str
    workdir: Path
    port: int = field(default_factory=lambda: pick(1)[0])
    drain_s: float = 4.0
    interval_s: float = 1.0
    args: tuple[str, ...] = ()  # more `kubeprof operator` flags
    # These tests play the agents from this machine, outside any pod (kwok runs no kubelet
    # to project a ServiceAccount token), so they send the session token: the fallback
    # mode. test_agent_identity runs "serviceaccount", the default, with TokenRequest tokens.
    agent_auth: str = "session-token"
    # Its identity: the operator ServiceAccount of the chart rendered with these values
    # ({}: a plain `helm install`), holding nothing but the chart's RBAC; the values a
    # deployment with the test's flags would have. None: the cluster's admin, only for a
    # test that says why no chart identity can do.
    chart_values: dict[str, Any] | None = field(default_factory=dict)
    proc: Proc | None = None
    refusals_said: bool = False  # its refused calls failed a test already

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Operator:
        argv = [
            *KUBEPROF,
            "operator",
            "--database-url",
            self.database_url,
            "--listen",
            f"127.0.0.1:{self.port}",
            "--ingest-url",
            self.url,
            "--reconcile-interval",
            str(self.interval_s),
            "--drain",
            str(self.drain_s),
            "--agent-image",
            "registry.invalid/kubeprof:e2e",
            "--agent-auth",
            self.agent_auth,
            *self.args,
        ]
        env = {"KUBECONFIG": str(self.kubeconfig())}
        self.proc = _spawn(argv, env, self.workdir / "operator.log")
        _STARTED.append(self)
        poll(self._healthy, 60, "operator /healthz")
        return self

    def kubeconfig(self) -> Path:
        """The credentials the operator runs with (see chart_values)."""
        if self.chart_values is None:
            return self.cluster.kubeconfig
        return chart_cluster.operator_identity(self.cluster, self.chart_values)

    def _healthy(self) -> bool:
        import urllib.request

        if self.proc is not None and not self.proc.alive():
            raise AssertionError(f"operator exited:\n{self.proc.text()[-3000:]}")
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=2) as r:
                return r.read() == b"ok"
        except OSError:
            return False

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
            return r.read().decode()

    def stop(self) -> None:
        """SIGTERM; then fail if the API server refused the operator anything meanwhile."""
        if self.proc is not None:
            self.proc.stop()
            self.assert_nothing_refused()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.assert_nothing_refused()

    def assert_nothing_refused(self) -> None:
        """The chart's rules were enough: no call of this operator was refused (its log).
        Said once per operator (one failed test, not every test after it)."""
        if self.proc is None or self.refusals_said:
            return
        denied = refusals(self.proc.text())
        self.refusals_said = bool(denied)
        assert not denied, (
            f"the API server refused the operator ({self.proc.log}) calls outside its "
            f"RBAC rules (charts/kubeprof/templates/rbac.yaml, values {self.chart_values}):\n"
            + "\n".join(denied[:10])
        )


# Every operator started by this process, until it has exited: tests/e2e/conftest.py checks
# their logs after each test, those a test never stops included.
_STARTED: list[Operator] = []


def assert_no_operator_refused() -> None:
    """No operator started so far was refused an API call; forget those that exited."""
    for op in list(_STARTED):
        if op.proc is None or not op.proc.alive() or op.refusals_said:
            _STARTED.remove(op)
        op.assert_nothing_refused()


def refusals(log: str) -> list[str]:
    """The lines of `log` that say an API call was refused by RBAC."""
    return REFUSED.findall(log)


def start_agent(
    op: Operator,
    namespace: str,
    name: str,
    node: str,
    token: str,
    workdir: Path,
    *extra: str,
    uid: str = "",
) -> Proc:
    """A real `kubeprof agent` for `node`, as the DaemonSet would run it."""
    token_file = workdir / f"token-{name}"
    token_file.write_text(token)
    token_file.chmod(0o600)
    env = {
        "NODE_NAME": node,
        "KUBEPROF_INGEST_URL": op.url,
        "KUBEPROF_SESSION_NAMESPACE": namespace,
        "KUBEPROF_SESSION": name,
        # The DaemonSet passes the session's UID, which keys its spool folder ("": the
        # folder of an agent started by hand, <namespace>_<name>).
        "KUBEPROF_SESSION_UID": uid,
        "KUBEPROF_TOKEN_FILE": str(token_file),
        "KUBEPROF_SPOOL_DIR": str(workdir / f"spool-{node}"),
        "KUBEPROF_RESCAN_INTERVAL_S": "1",
        "KUBEPROF_POLL_INTERVAL_S": "0.5",
        "KUBEPROF_DRAIN_TIMEOUT_S": "120",
    }
    return _spawn(
        [*KUBEPROF, "agent", "--collectors", "cpu", *extra],
        env,
        workdir / f"agent-{name}-{node}.log",
    )


def cgroup2_root() -> Path:
    """Where cgroup v2 is mounted (pure v2, or the hybrid layout's `unified`)."""
    for p in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (p / "cgroup.procs").exists() and (p / "cgroup.controllers").exists():
            return p
    raise RuntimeError("no cgroup v2 hierarchy mounted")


@dataclass
class PodProcess:
    """A Python process in a cgroup named like the kubelet's for pod `uid` (systemd driver)."""

    pod_uid: str
    seconds: float
    container_id: str = field(default_factory=lambda: uuid.uuid4().hex + uuid.uuid4().hex)
    popen: subprocess.Popen[bytes] | None = None

    @property
    def cgroup(self) -> Path:
        from kubeprof.agent.cluster.cgroups import cgroup_name

        return cgroup2_root() / cgroup_name(self.pod_uid, self.container_id)

    def start(self) -> PodProcess:
        self.cgroup.mkdir(parents=True, exist_ok=True)
        # The shell moves itself into the pod's cgroup, then becomes the workload.
        script = f'echo $$ > {self.cgroup}/cgroup.procs && exec "$0" -c "$1" "$2"'
        self.popen = subprocess.Popen(
            ["sh", "-c", script, sys.executable, WORKLOAD, str(self.seconds)]
        )
        poll(
            lambda: str(self.popen.pid) in (self.cgroup / "cgroup.procs").read_text(),
            10,
            "the workload to enter its pod cgroup",
        )
        return self

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
        if self.popen is not None:
            self.popen.wait(10)
        # Remove the leaf and the parents we made, innermost first (only if empty).
        root = cgroup2_root()
        leaf = self.cgroup
        for _ in range(50):  # the kernel may hold a just-emptied cgroup for a moment
            try:
                leaf.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
        d = leaf.parent
        while d != root and d.name.startswith("kubepods"):
            try:
                d.rmdir()
            except OSError:  # not empty: another pod process of this test run still uses it
                break
            d = d.parent


def ensure_absent(cluster: Cluster, namespace: str, name: str, timeout: float = 30) -> None:
    """Delete a leftover session (from an earlier failed run); drop finalizers if stuck."""
    if not get_json(cluster, "get", "profilingsession", "-n", namespace, name):
        return
    delete_session(cluster, namespace, name)
    try:
        poll(
            lambda: not get_json(cluster, "get", "profilingsession", "-n", namespace, name),
            timeout,
            f"leftover session {name} deleted",
        )
    except AssertionError:
        cluster.kubectl(
            "patch",
            "profilingsession",
            "-n",
            namespace,
            name,
            "--type=merge",
            "-p",
            '{"metadata":{"finalizers":[]}}',
            check=False,
        )


@dataclass
class Profiled:
    """A session with one target pod, its stand-in process and a real agent."""

    namespace: str
    name: str
    pod_uid: str
    node: str
    workload: PodProcess
    agent: Proc

    def stop(self) -> None:
        self.workload.stop()
        if self.agent.alive():
            self.agent.stop()

    def agent_summary(self) -> dict[str, int]:
        """Numbers from the agent's final log line ('agent done: N batches spooled, ...')."""
        import re

        m = re.search(
            r"agent done: (\d+) batches spooled, (\d+) sent \((\d+) duplicates, "
            r"(\d+) rows\), (\d+) retries, (\d+) rejected, (\d+) left",
            self.agent.text(),
        )
        if not m:
            return {}
        keys = ("spooled", "sent", "duplicates", "rows", "retries", "rejected", "left")
        return dict(zip(keys, map(int, m.groups()), strict=True))


def start_profiled(
    cluster: Cluster, op: Operator, namespace: str, name: str, duration: str, workdir: Path
) -> Profiled:
    """Namespace + Deployment(1) on a GPU node + session + workload in the pod cgroup + agent."""
    cluster.kubectl("create", "namespace", namespace, check=False)
    ensure_absent(cluster, namespace, name)
    cluster.kubectl("apply", "-f", "-", stdin=deployment_yaml(name, namespace))
    pod = poll(lambda: running_pods(cluster, namespace, name), 60, f"{name} pod Running")[0]
    uid, node = pod["metadata"]["uid"], pod["spec"]["nodeName"]
    workload = PodProcess(uid, seconds=300).start()
    cluster.kubectl("apply", "-f", "-", stdin=session_yaml(name, namespace, name, duration))
    poll(lambda: phase(cluster, namespace, name) == "Running", 60, f"{name} Running")
    agent = start_agent(op, namespace, name, node, session_token(cluster, namespace, name), workdir)
    return Profiled(namespace, name, uid, node, workload, agent)


def row_counts(libpq: str, store_session: str) -> dict[str, int]:
    """Stored rows of a session, and the checks that prove no duplicates."""
    import psycopg

    with psycopg.connect(libpq) as conn:
        sid = conn.execute("SELECT id FROM sessions WHERE name = %s", (store_session,)).fetchone()[
            0
        ]

        def one(sql: str) -> int:
            return int(conn.execute(sql, (sid,)).fetchone()[0])

        return {
            "samples": one("SELECT count(*) FROM samples WHERE session_id = %s"),
            "distinct_samples": one(
                "SELECT count(*) FROM (SELECT DISTINCT node, pid, tid, "
                "ts_ns FROM samples WHERE session_id = %s) d"
            ),
            "batches": one("SELECT count(*) FROM ingested_batches WHERE session_id = %s"),
            "batch_rows": one(
                "SELECT coalesce(sum(rows), 0) FROM ingested_batches WHERE session_id = %s"
            ),
        }
