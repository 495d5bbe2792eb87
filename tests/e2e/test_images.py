"""The released images, run here with podman (`make images` builds them; `make test` first):

* the operator image against the real control plane and PostgreSQL of the e2e tests: it
  migrates the database, and a ProfilingSession applied with kubectl gets its agent
  DaemonSet, whose image is the agent image built here;
* the agent image exactly as that DaemonSet's pod spec says (command, args, env,
  capabilities, securityContext, host mounts, limits: read from the object, see
  `pod_run_args`), profiling a real process of this machine with BPF: the samples reach the
  operator's ingest, the CR status and `kubeprof report`;
* the tracer bundle, copied by the injection webhook's init container spec into a folder
  that a CPU-only Python workload container then runs with: dormant, it answers the switch
  and says why it cannot trace (no GPU here) while the workload runs on;
* `helm template` with the built tags names only images that exist in `podman images`.

kwok's nodes run no containers, so this machine stands for the node: the one substitution
is the network (kwok pods have none; the containers use the host's, where the operator
listens on 127.0.0.1). The agent's projected ServiceAccount token is minted as the kubelet
mints it (TokenRequest bound to the agent pod), and the operator reviews it. Anything else
the pod spec says that this translation does not know fails the test, so a wrong
capability, a missing mount or a missing file in the image does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from kubeprof.agent.gpu.control import switch
from kubeprof.operator.config import IMAGE_REPO, default_image
from kubeprof.operator.webhook import InjectConfig, build_patch
from tests.e2e import chart_cluster
from tests.e2e import operator_helpers as h
from tests.e2e.cluster import Cluster
from tests.e2e.cluster.ports import pick
from tests.support import chart
from tests.support.chart import helm_built  # noqa: F401 - the fixture

pytestmark = [pytest.mark.e2e, pytest.mark.bpf]
ROOT = Path(__file__).resolve().parents[2]
PODMAN = ["podman", "--runtime", "runc"]  # crun refuses this machine's cgroup v1 hybrid
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]
OPERATOR, AGENT = default_image("operator"), default_image("agent")
# What containerd applies for `seccompProfile: RuntimeDefault` to a container with exactly
# these capabilities (tests/fixtures/seccomp/README.md); podman's own default differs.
SECCOMP = ROOT / "tests" / "fixtures" / "seccomp" / "containerd-runtimedefault-agent.json"
# (gen/ prints the same bytes with CAP_SYS_RESOURCE added: containerd's profile has no case
# for it, and the operator adds it for the kwok nodes' kernels, which say nothing newer.)
SECCOMP_CAPS = {"BPF", "PERFMON", "SYS_PTRACE"}
NS, NAME = "e2e-images", "imaged"


def podman(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*PODMAN, *args], capture_output=True, text=True, check=check, timeout=timeout
    )


def image_exists(ref: str) -> bool:
    return podman("image", "exists", ref, check=False).returncode == 0


@pytest.fixture(scope="module")
def images() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (podman with host PID, BPF, pod cgroups)")
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed: run `make images` (it installs and builds)")
    missing = [i for i in (OPERATOR, AGENT) if not image_exists(i)]
    if missing:
        pytest.fail(f"images not built: {missing}; run `make images`")


@pytest.fixture
def workdir(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A folder the containers share; removed after a passing test (each holds a
    PostgreSQL data folder and the agent's spool, ~0.5 GB), kept after a failing one."""
    d = Path(tempfile.mkdtemp(prefix="kubeprof-e2e-img-"))
    d.chmod(0o755)  # the operator container runs as 65532
    failed_before = request.session.testsfailed
    yield d
    if request.session.testsfailed > failed_before or os.environ.get("KUBEPROF_KEEP_E2E"):
        print(f"\nimage e2e files kept: {d}", file=sys.stderr)
    else:
        shutil.rmtree(d, ignore_errors=True)


class Container:
    """A detached podman container, removed by its own name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def logs(self) -> str:
        r = podman("logs", self.name, check=False)
        return r.stdout + r.stderr

    def running(self) -> bool:
        r = podman("inspect", "--format", "{{.State.Running}}", self.name, check=False)
        return r.stdout.strip() == "true"

    def wait(self, timeout: float) -> int:
        return int(podman("wait", self.name, timeout=timeout).stdout.strip().splitlines()[-1])

    def remove(self) -> None:
        podman("rm", "-f", "-t", "10", self.name, check=False, timeout=60)


def run_detached(name: str, *args: str) -> Container:
    podman("run", "-d", "--name", name, *LIMITS, *args)
    return Container(name)


# ---- a pod spec, as the kubelet and containerd would run it, in podman arguments ----

KNOWN_SC = {
    "privileged",
    "allowPrivilegeEscalation",
    "readOnlyRootFilesystem",
    "runAsUser",
    "runAsGroup",
    "capabilities",
    "seccompProfile",
}


def _env(
    e: dict[str, Any], pod: dict[str, Any], node: str, secrets: dict[str, dict[str, bytes]]
) -> str:
    if "value" in e:
        return str(e["value"])
    ref = e.get("valueFrom") or {}
    field = (ref.get("fieldRef") or {}).get("fieldPath")
    fields = {
        "spec.nodeName": node,
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"]["namespace"],
        "metadata.uid": pod["metadata"]["uid"],
        "status.hostIP": "127.0.0.1",
        "status.podIP": "127.0.0.1",
    }
    if field in fields:
        return fields[field]
    if "secretKeyRef" in ref:
        s = ref["secretKeyRef"]
        return secrets[s["name"]][s["key"]].decode()
    raise AssertionError(f"env {e['name']}: {ref} is not translated to podman")


def pod_run_args(
    pod: dict[str, Any],
    node: str,
    volumes_dir: Path,
    secrets: dict[str, dict[str, bytes]],
    container_name: str,
    mint: Callable[[dict[str, Any]], str] | None = None,
) -> tuple[list[str], str, list[str]]:
    """(podman run options, image, arguments after it) for one container of `pod`;
    `mint` makes the token of a projected serviceAccountToken source, as the kubelet does."""
    spec = pod["spec"]
    [c] = [c for c in spec["containers"] if c["name"] == container_name]
    opts: list[str] = ["--network", "host"]  # see the module docstring
    if spec.get("hostPID"):
        opts += ["--pid", "host"]
    if spec.get("hostNetwork") is False or spec.get("hostIPC"):
        raise AssertionError(f"pod networking/IPC {spec} is not translated")
    sc = dict(c.get("securityContext") or {})
    unknown = set(sc) - KNOWN_SC
    assert not unknown, f"securityContext fields not translated: {unknown}"
    if sc.get("privileged"):
        opts.append("--privileged")
    if sc.get("allowPrivilegeEscalation") is False:
        opts += ["--security-opt", "no-new-privileges"]
    if sc.get("readOnlyRootFilesystem"):
        opts += ["--read-only", "--read-only-tmpfs=false"]  # no tmpfs the pod does not have
    if "runAsUser" in sc:
        opts += ["--user", f"{sc['runAsUser']}:{sc.get('runAsGroup', sc['runAsUser'])}"]
    caps = sc.get("capabilities") or {}
    for cap in caps.get("drop") or []:
        opts += ["--cap-drop", "ALL" if cap == "ALL" else f"CAP_{cap}"]
    for cap in caps.get("add") or []:
        opts += ["--cap-add", f"CAP_{cap}"]
    # unset: the kubelet's default, Unconfined (without its --seccomp-default)
    seccomp = (sc.get("seccompProfile") or {}).get("type", "Unconfined")
    if seccomp == "RuntimeDefault":
        assert set(caps.get("add") or []) - {"SYS_RESOURCE"} == SECCOMP_CAPS, (
            f"no containerd RuntimeDefault profile here for capabilities {caps}"
        )
        opts += ["--security-opt", f"seccomp={SECCOMP}"]
    elif seccomp == "Unconfined":
        opts += ["--security-opt", "seccomp=unconfined"]
    else:
        raise AssertionError(f"seccompProfile {seccomp} is not translated")
    limits = (c.get("resources") or {}).get("limits") or {}
    if "memory" in limits:
        opts += ["--memory", str(limits["memory"]).replace("Mi", "m").replace("Gi", "g")]
    if "cpu" in limits:
        cpu = str(limits["cpu"])
        opts += ["--cpus", str(int(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu))]
    for e in c.get("env") or []:
        opts += ["--env", f"{e['name']}={_env(e, pod, node, secrets)}"]
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    for m in c.get("volumeMounts") or []:
        assert not m.get("subPath"), f"subPath mount {m} is not translated"
        v = dict(volumes[m["name"]])
        ro = ":ro" if m.get("readOnly") else ""
        if "hostPath" in v:
            path = Path(v["hostPath"]["path"])
            kind = v["hostPath"].get("type", "")
            if kind == "DirectoryOrCreate":
                path.mkdir(parents=True, exist_ok=True)
            assert path.exists(), f"hostPath {path} ({m['name']}) is missing on this node"
            src = path
        elif "secret" in v:
            src = volumes_dir / m["name"]
            src.mkdir(mode=0o700)
            mode = v["secret"].get("defaultMode", 0o644)
            for key, data in secrets[v["secret"]["secretName"]].items():
                (src / key).write_bytes(data)
                (src / key).chmod(mode)
        elif "emptyDir" in v:
            src = volumes_dir / m["name"]
            src.mkdir(mode=0o777)
            src.chmod(0o777)
        elif "projected" in v and mint is not None:
            src = volumes_dir / m["name"]
            src.mkdir(mode=0o700)
            for source in v["projected"]["sources"]:
                sat = source["serviceAccountToken"]  # the only projection agents use
                (src / sat["path"]).write_text(mint(sat))
                (src / sat["path"]).chmod(v["projected"].get("defaultMode", 0o644))
        else:
            raise AssertionError(f"volume {v} is not translated")
        opts += ["--volume", f"{src}:{m['mountPath']}{ro}"]
    if c.get("command"):
        opts += ["--entrypoint", json.dumps(c["command"])]
    return opts, c["image"], list(c.get("args") or [])


def pod_token(cluster: Cluster, pod: dict[str, Any], source: dict[str, Any]) -> str:
    """A projected ServiceAccount token of `pod`, as the kubelet asks for it: TokenRequest
    for the pod's ServiceAccount, bound to the pod, with the source's audience and life."""
    meta = pod["metadata"]
    return cluster.kubectl(
        "create",
        "token",
        pod["spec"].get("serviceAccountName") or "default",
        "-n",
        meta["namespace"],
        "--audience",
        source["audience"],
        "--duration",
        f"{source.get('expirationSeconds', 3600)}s",
        "--bound-object-kind",
        "Pod",
        "--bound-object-name",
        meta["name"],
        "--bound-object-uid",
        meta["uid"],
    ).stdout.strip()


def secrets_of(cluster: Cluster, namespace: str, pod_spec: dict[str, Any]) -> dict:
    """The Secrets the pod spec names (volumes and env), as the kubelet reads them."""
    import base64

    names = {v["secret"]["secretName"] for v in pod_spec.get("volumes") or [] if "secret" in v}
    for c in pod_spec["containers"]:
        for e in c.get("env") or []:
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                names.add(ref["name"])
    out = {}
    for n in names:
        s = h.get_json(cluster, "get", "secret", "-n", namespace, n)
        assert s, f"Secret {n} of the agent pod is missing"
        out[n] = {k: base64.b64decode(v) for k, v in (s.get("data") or {}).items()}
    return out


# ---- the operator image ----


@pytest.fixture
def operator(
    images: None, k8s_cluster: Cluster, postgres_dsn, workdir: Path
) -> Iterator[tuple[Container, str]]:
    h.apply_crd(k8s_cluster)
    kubeconfig = workdir / "kubeconfig"
    # The chart's operator ServiceAccount, as every e2e operator (operator_helpers.Operator).
    shutil.copy(chart_cluster.operator_identity(k8s_cluster, {}), kubeconfig)
    kubeconfig.chmod(0o644)
    spool = workdir / "spool"
    port = pick(1)[0]
    url = f"http://127.0.0.1:{port}"
    op = run_detached(
        f"kubeprof-e2e-operator-{uuid.uuid4().hex[:6]}",
        "--network",
        "host",
        "--read-only",  # as the chart runs it
        "--volume",
        f"{kubeconfig}:/etc/kubeprof/kubeconfig:ro",
        "--env",
        "KUBECONFIG=/etc/kubeprof/kubeconfig",
        OPERATOR,
        "--database-url",
        postgres_dsn.url,
        "--listen",
        f"127.0.0.1:{port}",
        "--ingest-url",
        url,
        "--reconcile-interval",
        "1",
        "--drain",
        "4",
        "--agent-spool-host-path",
        str(spool),
    )
    try:

        def healthy() -> bool:
            import urllib.request

            if not op.running():
                raise AssertionError(f"operator container exited:\n{op.logs()[-3000:]}")
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2) as r:
                    return r.read() == b"ok"
            except OSError:
                return False

        h.poll(healthy, 120, "the operator container's /healthz")
        yield op, url
    finally:
        log = op.logs()
        (workdir / "operator.log").write_text(log)
        op.remove()
        kubeconfig.unlink()  # the operator's credentials: not left in /tmp
        shutil.rmtree(workdir / "volumes" / "token", ignore_errors=True)  # the ingest token
    denied = h.refusals(log)
    why = "the API server refused the operator container calls outside the chart's RBAC:\n"
    assert not denied, why + "\n".join(denied[:10])


@pytest.mark.usefixtures("operator")
def test_operator_and_agent_images_profile_a_real_process_from_the_daemonset_spec(
    k8s_cluster: Cluster, postgres_dsn, workdir: Path
) -> None:
    c = k8s_cluster
    user = podman("run", "--rm", *LIMITS, "--entrypoint", "id", OPERATOR).stdout
    assert user.startswith("uid=65532"), user  # the operator image runs non-root
    with psycopg.connect(postgres_dsn.libpq) as conn:  # migrations ran, to the one head
        heads = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    assert len(heads) == 1, heads

    c.kubectl("create", "namespace", NS, check=False)
    h.ensure_absent(c, NS, NAME)
    c.kubectl("apply", "-f", "-", stdin=h.deployment_yaml(NAME, NS))
    pod = h.poll(lambda: h.running_pods(c, NS, NAME), 60, "target pod Running")[0]
    uid, node = pod["metadata"]["uid"], pod["spec"]["nodeName"]
    workload = h.PodProcess(uid, seconds=180).start()
    agent: Container | None = None
    try:
        c.kubectl("apply", "-f", "-", stdin=h.session_yaml(NAME, NS, NAME, "25s"))
        h.poll(lambda: h.phase(c, NS, NAME) == "Running", 60, "phase Running")
        ds = h.poll(
            lambda: h.get_json(c, "get", "ds", "-n", NS, f"kubeprof-{NAME}-agent"),
            30,
            "the agent DaemonSet",
        )
        template = ds["spec"]["template"]
        assert template["spec"]["containers"][0]["image"] == AGENT  # the operator's default
        assert image_exists(AGENT)
        # the agent pod the DaemonSet made on the target's node, as the kubelet runs it
        agent_pod = h.poll(
            lambda: [
                p
                for p in (h.get_json(c, "get", "pods", "-n", NS) or {}).get("items", [])
                if p["spec"].get("nodeName") == node
                and p["metadata"]["name"].startswith(f"kubeprof-{NAME}-agent")
            ],
            60,
            "the agent pod on the target's node",
        )[0]
        vols = workdir / "volumes"
        vols.mkdir()
        opts, image, args = pod_run_args(
            agent_pod,
            node,
            vols,
            secrets_of(c, NS, agent_pod["spec"]),
            "agent",
            mint=lambda source: pod_token(c, agent_pod, source),
        )
        (workdir / "agent-run.json").write_text(json.dumps([*opts, image, *args], indent=1))
        agent = run_detached(f"kubeprof-e2e-agent-{uuid.uuid4().hex[:6]}", *opts, image, *args)
        h.poll(lambda: h.phase(c, NS, NAME) == "Completed", 180, "phase Completed")
        rc = agent.wait(120)
        agent_log = agent.logs()
        (workdir / "agent.log").write_text(agent_log)
        assert rc == 0, agent_log[-3000:]
        # the BPF sampler ran (its py-spy stand-in would say so here)
        assert "collectors cpu" in agent_log and "BPF CPU sampler unavailable" not in agent_log
    finally:
        workload.stop()
        if agent is not None:
            (workdir / "agent.log").write_text(agent.logs())
            agent.remove()

    st = h.session(c, NS, NAME)["status"]
    assert st["samples"] > 20, (st, agent.logs()[-2000:])
    assert any("kubeprof_e2e" in s for s in st["topStacks"]), st["topStacks"]
    assert st["summary"]["pods"][0]["name"] == f"{NS}/{pod['metadata']['name']}"
    report = subprocess.run(
        [*h.KUBEPROF, "report", "--store", postgres_dsn.url, st["storeSession"]],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    assert "kubeprof_e2e_hot" in report, report[-3000:]
    h.delete_session(c, NS, NAME)


# ---- the tracer bundle, as the injection webhook's init container copies it ----

WORK = """
import sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    time.sleep(0.05)
print("workload done", flush=True)
"""


def test_the_bundle_copied_by_the_init_container_runs_dormant_and_says_no_gpu(
    images: None, workdir: Path
) -> None:
    base = podman(
        "images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", "reference=kubeprof-base"
    ).stdout.split()
    assert base, "no localhost/kubeprof-base image: run `make images`"
    cfg = InjectConfig(image=AGENT)
    pod = {
        "metadata": {"name": "trainer-0", "namespace": "ml", "uid": str(uuid.uuid4())},
        "spec": {"containers": [{"name": "main", "image": base[0]}]},
    }
    ops = build_patch(pod, cfg)
    patched = {"metadata": pod["metadata"], "spec": {}}
    for op in ops:  # the patch adds whole lists here (the pod had none)
        parts = op["path"].split("/")[1:]
        if parts[:2] == ["spec", "containers"]:
            pod["spec"]["containers"][int(parts[2])][parts[3]] = op["value"]
        elif parts[0] == "spec":
            patched["spec"][parts[1]] = op["value"]
    patched["spec"]["containers"] = pod["spec"]["containers"]
    vols = workdir / "volumes"
    vols.mkdir()
    # the node's receiver folder: this test's own, not the real /run/kubeprof/rx
    for v in patched["spec"]["volumes"]:
        if "hostPath" in v:
            v["hostPath"]["path"] = str(workdir / "node-rx")
    [init] = patched["spec"]["initContainers"]
    init_pod = {**patched, "spec": {**patched["spec"], "containers": [init]}}
    opts, image, args = pod_run_args(init_pod, "node-0", vols, {}, init["name"])
    assert image == AGENT
    copied = podman("run", "--rm", *LIMITS, *opts, image, *args, check=False)
    assert copied.returncode == 0, copied.stderr
    assert "copied /opt/kubeprof/tracer" in copied.stdout, copied.stdout
    bundle = vols / "kubeprof-tracer"
    assert list((bundle / "lib" / "kubeprof" / "agent" / "gpu").glob("_launchhook.abi3.so"))

    # the workload container: a CPU-only Python image, the injected env and mounts, the
    # same emptyDir folders (reused by name: the pod's volumes)
    main = dict(patched["spec"]["containers"][0])
    main["command"] = ["python3", "-c", WORK, "40"]
    work_pod = {**patched, "spec": {**patched["spec"], "containers": [main]}}
    wvols = workdir / "work-volumes"
    wvols.mkdir()
    opts, image, args = pod_run_args(work_pod, "node-0", wvols, {}, "main")
    opts = [
        o.replace(f"{wvols}/kubeprof-tracer:", f"{bundle}:") for o in opts
    ]  # the init container's emptyDir
    # the default securityContext of a pod: no translation options given
    assert "--cap-add" not in opts
    wl = run_detached(f"kubeprof-e2e-traced-{uuid.uuid4().hex[:6]}", *opts, image, *args)
    try:
        ctl = wvols / "kubeprof-gpu-ctl"
        sock = h.poll(lambda: sorted(ctl.glob("*.sock")), 60, "the dormant tracer's socket")[0]
        assert switch(sock, "status") == "dormant"
        answer = switch(sock, "on", timeout_s=60)
        assert answer.startswith("error: "), answer
        status = switch(sock, "status")
        assert status.startswith("unsupported: "), status
        assert wl.wait(120) == 0, wl.logs()[-3000:]
        log = wl.logs()
    finally:
        (workdir / "traced.log").write_text(wl.logs())
        wl.remove()
    assert "workload done" in log, log
    said = [ln for ln in log.splitlines() if "GPU tracing unavailable: " in ln]
    assert len(said) == 1, log  # once, in the pod's log, with the reason the agent got
    reason = said[0].split("GPU tracing unavailable: ", 1)[1]
    assert reason in answer and reason in status, (reason, answer, status)
    assert any(w in reason.lower() for w in ("no gpu", "driver", "libcuda")), reason
    assert "Traceback" not in log, log


# ---- the chart's images ----


@pytest.mark.usefixtures("images", "helm_built")
def test_helm_template_renders_images_that_exist() -> None:
    docs = chart.render({"lightAgent": {"enabled": True}})  # every workload the chart has
    refs: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "image" and isinstance(v, str):
                    refs.add(v)
                elif isinstance(v, str) and v.startswith(f"{IMAGE_REPO}/"):
                    refs.add(v)  # the agent image, handed to the operator in its env
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(docs)
    ours = {r for r in refs if r.startswith(f"{IMAGE_REPO}/")}
    assert ours == {OPERATOR, AGENT}, refs
    have = set(podman("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split())
    assert ours <= have, (ours - have, sorted(have))
