"""etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok on 127.0.0.1.

One run folder holds everything (pki, kubeconfig, etcd data, logs, pid files, state.json),
so a test cluster in a temp dir and a hand-started one can run side by side.
"""

import json
import shutil
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from . import binaries, nodes, ports, processes
from .certs import Pki, make_pki, write_kubeconfig
from .kubeapi import ApiError, KubeApi
from .processes import ComponentError, Proc

ClusterError = ComponentError
MARKER = ".kubeprof-cluster"
# Stop order: dependents first, etcd last.
COMPONENTS = ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")
SERVICE_CIDR, SERVICE_IP, POD_CIDR = "10.96.0.0/16", "10.96.0.1", "10.64.0.1/12"


def _healthz(port: int) -> bool:
    """KCM/scheduler self-signed /healthz (allowed anonymously by default)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=3) as r:
        return r.read() == b"ok"


def _etcd_health(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=3) as r:
        return json.loads(r.read()).get("health") == "true"


@dataclass
class Cluster:
    """A control plane rooted in run_dir; up() is idempotent, down() stops only our PIDs."""

    run_dir: Path
    gpu_nodes: int = 4
    cpu_nodes: int = 2
    ports: dict[str, int] = field(default_factory=dict)
    # kwok renews each node's Lease every quarter of this; at 10,000 nodes the default 40 s
    # is ~1,000 writes/s, so benchmarks at that scale raise it (KCM's grace period follows).
    node_lease_s: int = 40

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir).resolve()
        state = self._state_file
        if state.is_file():
            self.ports = json.loads(state.read_text()).get("ports", {})

    # -- paths and clients -------------------------------------------------------------
    @property
    def _state_file(self) -> Path:
        return self.run_dir / "state.json"

    @property
    def pki(self) -> Pki:
        """TLS material of this cluster."""
        return Pki(self.run_dir / "pki")

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (certs embedded)."""
        return self.run_dir / "kubeconfig"

    @property
    def server(self) -> str:
        """https URL of the apiserver."""
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def api(self) -> KubeApi:
        """Stdlib client with admin credentials."""
        p = self.pki
        return KubeApi(self.server, p.ca_crt, p.admin_crt, p.admin_key)

    def log(self, component: str) -> Path:
        """Log file of one component."""
        return self.run_dir / "logs" / f"{component}.log"

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster, capturing text output."""
        return subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    # -- lifecycle ---------------------------------------------------------------------
    def is_running(self) -> bool:
        """All recorded components alive and the apiserver ready."""
        if not self._state_file.is_file() or not self.ports:
            return False
        for c in COMPONENTS:
            rec = processes.read_pidfile(self.run_dir / "pids" / f"{c}.pid")
            if not rec or not processes.is_ours(*rec):
                return False
        try:
            return self.api.ready()
        except (OSError, ApiError):  # refused, TLS, timeout: not running
            return False

    def up(self, timeout_scale: float = 1.0) -> "Cluster":
        """Start everything (or reuse a running cluster) and wait until nodes are Ready."""
        if self.is_running():
            self._ensure_nodes(timeout_scale)
            return self
        self.down()
        try:
            self._fresh_start(timeout_scale)
        except BaseException:
            self.down()  # keep logs, drop processes
            raise
        return self

    def down(self) -> list[str]:
        """Stop the components recorded in pid files; returns the names that were running."""
        stopped = [
            c for c in COMPONENTS if processes.stop_pidfile(self.run_dir / "pids" / f"{c}.pid")
        ]
        self._state_file.unlink(missing_ok=True)
        return stopped

    def _reset_run_dir(self) -> None:
        d = self.run_dir
        if d.exists() and any(d.iterdir()):
            if not (d / MARKER).exists():
                raise ClusterError(f"refusing to wipe {d}: not a kubeprof cluster run folder")
            for child in d.iterdir():
                if child.name == "postgres":  # owned by postgres.py, kept across restarts
                    continue
                if child.is_dir():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o711)  # traversable, not listable: postgres/ inside runs as another user
        (d / MARKER).write_text("run folder of tests/e2e/cluster; safe to delete when down\n")

    def _fresh_start(self, scale: float) -> None:
        b = binaries.ensure_built()
        self._reset_run_dir()
        names = ("apiserver", "etcd_client", "etcd_peer", "kcm", "scheduler")
        self.ports = dict(zip(names, ports.pick(len(names)), strict=True))
        self._state_file.write_text(json.dumps({"ports": self.ports}, indent=1))
        pki = make_pki(self.run_dir / "pki", SERVICE_IP)
        write_kubeconfig(self.kubeconfig, pki, self.server)
        run = self.run_dir
        p = self.ports
        etcd_url = f"http://127.0.0.1:{p['etcd_client']}"
        peer_url = f"http://127.0.0.1:{p['etcd_peer']}"

        etcd = processes.start(
            "etcd",
            [
                str(b.etcd),
                "--name=kubeprof-e2e",
                f"--data-dir={run / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=kubeprof-e2e={peer_url}",
                "--unsafe-no-fsync",
                "--auto-compaction-retention=1",
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
            run,
        )
        processes.wait_until(etcd, lambda: _etcd_health(p["etcd_client"]), 30 * scale)

        apiserver = processes.start(
            "kube-apiserver",
            [
                str(b.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                f"--secure-port={p['apiserver']}",
                "--advertise-address=127.0.0.1",
                f"--tls-cert-file={pki.apiserver_crt}",
                f"--tls-private-key-file={pki.apiserver_key}",
                f"--client-ca-file={pki.ca_crt}",
                "--authorization-mode=Node,RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                "--endpoint-reconciler-type=none",
                "--enable-priority-and-fairness=false",
                "--max-requests-inflight=0",
                "--max-mutating-requests-inflight=0",
                f"--cert-dir={run / 'serving'}",
            ],
            run,
        )
        api = self.api
        processes.wait_until(apiserver, api.ready, 120 * scale)

        kcm = processes.start(
            "kube-controller-manager",
            [
                str(b.kube_controller_manager),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={p['kcm']}",
                f"--root-ca-file={pki.ca_crt}",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--cluster-signing-cert-file={pki.ca_crt}",
                f"--cluster-signing-key-file={pki.ca_key}",
                "--controllers=*",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                *(
                    [f"--node-monitor-grace-period={2 * self.node_lease_s}s"]
                    if self.node_lease_s > 40
                    else []
                ),
                f"--cert-dir={run / 'serving'}",
            ],
            run,
        )
        sched = processes.start(
            "kube-scheduler",
            [
                str(b.kube_scheduler),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={p['scheduler']}",
                f"--cert-dir={run / 'serving'}",
            ],
            run,
        )
        processes.wait_until(kcm, lambda: _healthz(p["kcm"]), 60 * scale)
        processes.wait_until(sched, lambda: _healthz(p["scheduler"]), 60 * scale)

        stage_args = [a for s in b.kwok_stages for a in ("-c", str(s))]
        processes.start(
            "kwok",
            [
                str(b.kwok),
                f"--kubeconfig={self.kubeconfig}",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                # Leases are the liveness signal: the heartbeat stage only patches status every
                # ~10 min, and without leases KCM marks nodes Unknown and pods NotReady.
                f"--node-lease-duration-seconds={self.node_lease_s}",
                f"--cidr={POD_CIDR}",
                "--node-ip=127.0.0.1",
                *stage_args,
            ],
            run,
        )
        self._ensure_nodes(scale)
        # Pods need the "default" ServiceAccount (made by KCM) or admission rejects them.
        processes.wait_until(
            kcm,
            lambda: bool(api.get("/api/v1/namespaces/default/serviceaccounts/default")),
            60 * scale,
            "done creating the default ServiceAccount",
        )

    def _ensure_nodes(self, scale: float) -> None:
        want = self.gpu_nodes + self.cpu_nodes
        nodes.create(self.api, self.gpu_nodes, self.cpu_nodes)
        kwok = processes.Proc("kwok", *self._pid("kwok"), self.log("kwok"))
        processes.wait_until(
            kwok,
            lambda: nodes.count_ready(self.api) >= want and nodes.count_leased(self.api) >= want,
            (60 + want / 10) * scale,
            f"done with {want} Ready, leased nodes",
        )

    def _pid(self, component: str) -> tuple[int, Path]:
        rec = processes.read_pidfile(self.run_dir / "pids" / f"{component}.pid")
        if rec is None:
            raise ClusterError(f"{component} has no pid file in {self.run_dir / 'pids'}")
        return rec

    def env(self) -> dict[str, str]:
        """Environment a client needs."""
        return {"KUBECONFIG": str(self.kubeconfig)}


def wait_gone(api: KubeApi, path: str, timeout: float = 60) -> None:
    """Poll until GET path answers 404 (object deleted, finalizers done)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            api.get(path)
        except ApiError as e:
            if e.status == 404:
                return
            raise
        time.sleep(0.2)
    raise TimeoutError(f"{path} still exists after {timeout}s")


__all__ = ["Cluster", "ClusterError", "Proc", "wait_gone"]
