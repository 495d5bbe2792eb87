"""Mutating admission webhook: put the dormant GPU tracer into pods that opted in.

A pod opts in with the label ``kubeprof.dev/inject: "true"`` on itself or on its namespace
(``"false"`` on the pod opts a pod of an opted-in namespace out). The API server only calls
for those pods: the MutatingWebhookConfiguration (charts/kubeprof/templates/webhook.yaml)
selects them with namespaceSelector/objectSelector and says ``failurePolicy: Ignore``, so
pod creation never waits on, or fails because of, the operator.

The patch (``build_patch``, pure) adds, without rebuilding the user's image:

* an init container from the agent image that copies the tracer (the ``kubeprof`` package
  and cupti-python) into an emptyDir;
* that emptyDir, read-only, in every container, with ``PYTHONPATH`` naming the tracer's
  ``sitecustomize`` folder first, so every Python process loads it at interpreter start
  (``kubeprof.agent.gpu.inject``);
* the node's receiver folder ``<socket host path>/rx`` (hostPath, **read-only**: a pod can
  connect to the agents' sockets there but cannot bind or replace one) and a per-pod emptyDir
  at ``/run/kubeprof/ctl`` for the processes' control sockets. No other pod sees that emptyDir;
  the node agent reaches it through ``/proc/<pid>/root`` of the pod's own processes and checks
  the answering process's cgroup (SO_PEERCRED), so one pod can neither switch nor spoof
  another's tracer, and a non-root workload (any uid) can create its socket there;
* ``KUBEPROF_GPU_DORMANT=1``: the tracer subscribes to nothing until the node agent switches
  it on for a ProfilingSession.

This module serves the webhook over TLS on its own port (the API server calls webhooks
only over HTTPS) with aiohttp, on a thread next to kopf.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import threading
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from kubeprof.operator.config import DEFAULT_PULL_POLICY, DEFAULT_SOCKET_HOST_PATH

LABEL = "kubeprof.dev/inject"
ANNOTATION = "kubeprof.dev/injected"
INIT_NAME = "kubeprof-tracer"
TRACER_VOLUME = "kubeprof-tracer"
SOCKET_VOLUME = "kubeprof-gpu-socket"
CTL_VOLUME = "kubeprof-gpu-ctl"
# Inside pods and agent containers: the receivers (one socket per session, named by the
# session's uid) and the per-pod control sockets. The agent DaemonSet mounts the same node
# folder at the same place (build.py).
POD_SOCKET_DIR = "/run/kubeprof"
RX_SUBDIR = "rx"
CTL_SUBDIR = "ctl"
PATH = "/mutate-pods"

# Runs in the init container (the agent image's Python): copy the tracer bundle
# (kubeprof.agent.gpu.bundle: lib/, deps/, one py/cp3XY/ per Python 3.10-3.13, made by
# docker/agent.Dockerfile). It cannot know the pod's Python, so it copies every build; the
# tracer picks its own at start. Without a bundle (a development image): this Python's
# kubeprof, and its cupti as the build for this Python only.
COPY_SCRIPT = """\
import shutil, sys, os, pathlib, importlib.util
dest = pathlib.Path(sys.argv[1])
skip = shutil.ignore_patterns("__pycache__")
bundle = pathlib.Path(os.environ.get("KUBEPROF_TRACER_BUNDLE", "/opt/kubeprof/tracer"))
if (bundle / "lib" / "kubeprof").is_dir():
    shutil.copytree(bundle, dest, dirs_exist_ok=True, ignore=skip)
    print(f"kubeprof-tracer: copied {bundle} into {dest}", flush=True)
    sys.exit(0)
tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
# cupti-python imports pyelftools
for name, into in (("kubeprof", "lib"), ("cupti", f"py/{tag}"), ("elftools", "deps")):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        print(f"kubeprof-tracer: {name} not in the agent image; skipped", flush=True)
        continue
    for src in spec.submodule_search_locations:  # a namespace package has several
        shutil.copytree(src, dest / into / name, dirs_exist_ok=True, ignore=skip)
print(f"kubeprof-tracer: copied this image's kubeprof into {dest}", flush=True)
"""


@dataclass(frozen=True)
class InjectConfig:
    """What the patch puts into pods (operator flags / chart values)."""

    image: str
    image_pull_policy: str = DEFAULT_PULL_POLICY
    socket_host_path: str = DEFAULT_SOCKET_HOST_PATH  # folder on the node where the agent listens
    mount_path: str = "/kubeprof"  # where the tracer appears in the pod's containers
    socket_mount_path: str = POD_SOCKET_DIR
    python: str = "python3"  # the agent image's interpreter (runs COPY_SCRIPT)

    @property
    def site_dir(self) -> str:
        return f"{self.mount_path}/lib/kubeprof/agent/gpu/_site"

    # One path each, spelled out: alike in shape only.
    @property
    def rx_dir(self) -> str:
        """Where the node agents' receiver sockets appear in the pod (read-only)."""
        return f"{self.socket_mount_path}/{RX_SUBDIR}"

    @property
    def ctl_dir(self) -> str:
        """The pod's own folder for its processes' control sockets (an emptyDir)."""
        return f"{self.socket_mount_path}/{CTL_SUBDIR}"

    @property
    def socket(self) -> str:
        """KUBEPROF_GPU_SOCKET: its folder is where ``on <session uid>`` looks for receivers."""
        return f"{self.rx_dir}/gpu.sock"


def opted_out(pod: dict[str, Any]) -> bool:
    """A pod of an opted-in namespace that says ``kubeprof.dev/inject: "false"``."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return str(labels.get(LABEL, "")).lower() == "false"


def _env_for(container: dict[str, Any], cfg: InjectConfig) -> list[dict[str, Any]]:
    """The container's env with the tracer's variables; a set PYTHONPATH is kept after ours."""
    env = [dict(e) for e in container.get("env") or []]
    names = {e.get("name") for e in env}
    extra: list[dict[str, Any]] = [
        {"name": "KUBEPROF_GPU_SOCKET", "value": cfg.socket},
        {"name": "KUBEPROF_GPU_DORMANT", "value": "1"},
        {"name": "KUBEPROF_GPU_CTL_DIR", "value": cfg.ctl_dir},
        {"name": "KUBEPROF_GPU_BUNDLE", "value": cfg.mount_path},  # cupti-python per Python
        # names the folder of the process's control socket, so the node agent finds it
        {"name": "KUBEPROF_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    ]
    ours = f"{cfg.site_dir}:{cfg.mount_path}/lib"
    for e in env:
        if e.get("name") == "PYTHONPATH" and not str(e.get("value", ours)).startswith(ours):
            e["value"] = f"{ours}:{e['value']}" if e["value"] else ours
    if "PYTHONPATH" not in names:
        extra.insert(0, {"name": "PYTHONPATH", "value": ours})
    env += [e for e in extra if e["name"] not in names]
    return env


def build_patch(pod: dict[str, Any], cfg: InjectConfig) -> list[dict[str, Any]]:
    """The RFC 6902 JSONPatch that injects the dormant tracer; [] when nothing to do.

    Idempotent: a pod that already has the init container (re-invocation, or a pod
    re-created from an injected spec) gets no patch; an opted-out pod gets none either.
    """
    spec = pod.get("spec") or {}
    inits = spec.get("initContainers") or []
    if opted_out(pod) or any(c.get("name") == INIT_NAME for c in inits):
        return []
    ops: list[dict[str, Any]] = []

    def add_all(path: str, present: bool, items: list[dict[str, Any]]) -> None:
        if present:
            ops.extend({"op": "add", "path": f"{path}/-", "value": i} for i in items)
        else:
            ops.append({"op": "add", "path": path, "value": items})

    tracer_mount = {"name": TRACER_VOLUME, "mountPath": cfg.mount_path}
    init = {
        "name": INIT_NAME,
        "image": cfg.image,
        "imagePullPolicy": cfg.image_pull_policy,
        "command": [cfg.python, "-c", COPY_SCRIPT, cfg.mount_path],
        "volumeMounts": [tracer_mount],
        "resources": {
            "requests": {"cpu": "10m", "memory": "32Mi"},
            "limits": {"cpu": "500m", "memory": "128Mi"},
        },
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    # First, so the tracer is in place before any other init container runs Python.
    if inits:
        ops.append({"op": "add", "path": "/spec/initContainers/0", "value": init})
    else:
        ops.append({"op": "add", "path": "/spec/initContainers", "value": [init]})
    add_all(
        "/spec/volumes",
        bool(spec.get("volumes")),
        [
            {"name": TRACER_VOLUME, "emptyDir": {}},
            {"name": CTL_VOLUME, "emptyDir": {}},  # 0777: any uid in the pod may bind
            {
                "name": SOCKET_VOLUME,
                "hostPath": {
                    "path": f"{cfg.socket_host_path.rstrip('/')}/{RX_SUBDIR}",
                    "type": "DirectoryOrCreate",
                },
            },
        ],
    )
    mounts: list[dict[str, Any]] = [
        {"name": TRACER_VOLUME, "mountPath": cfg.mount_path, "readOnly": True},
        {"name": CTL_VOLUME, "mountPath": cfg.ctl_dir},
        {"name": SOCKET_VOLUME, "mountPath": cfg.rx_dir, "readOnly": True},
    ]
    for i, c in enumerate(spec.get("containers") or []):
        base = f"/spec/containers/{i}"
        add_all(f"{base}/volumeMounts", bool(c.get("volumeMounts")), [{**m} for m in mounts])
        ops.append({"op": "add", "path": f"{base}/env", "value": _env_for(c, cfg)})
    if not (pod.get("metadata") or {}).get("annotations"):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    ops.append(
        {
            "op": "add",
            "path": "/metadata/annotations/" + ANNOTATION.replace("/", "~1"),
            "value": "dormant",
        }
    )
    return ops


class ReviewError(ValueError):
    """An AdmissionReview the webhook cannot answer; the message names the field."""


def review_response(review: Any, cfg: InjectConfig) -> dict[str, Any]:
    """The AdmissionReview answer: always allowed, with the patch when there is one."""
    if not isinstance(review, dict) or not isinstance(review.get("request"), dict):
        raise ReviewError("body.request: expected an admission.k8s.io/v1 AdmissionReview")
    req = review["request"]
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("body.request.uid: missing")
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    pod = req.get("object")
    kind = (req.get("kind") or {}).get("kind")
    if kind == "Pod" and isinstance(pod, dict) and req.get("operation", "CREATE") == "CREATE":
        ops = build_patch(pod, cfg)
        if ops:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    return {
        "apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
        "kind": "AdmissionReview",
        "response": response,
    }


def make_app(cfg: InjectConfig) -> web.Application:
    """The aiohttp app answering POST /mutate-pods."""

    async def mutate(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return web.json_response(
                {"error": "body: not JSON; send an AdmissionReview"}, status=400
            )
        try:
            return web.json_response(review_response(body, cfg))
        except ReviewError as exc:
            return web.json_response({"error": str(exc)}, status=400)

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app = web.Application(client_max_size=4 * 1024 * 1024)
    app.router.add_post(PATH, mutate)
    app.router.add_get("/healthz", healthz)
    return app


class WebhookServer:
    """The webhook's HTTPS server on its own thread and event loop (kopf owns the main one)."""

    def __init__(self, cfg: InjectConfig, host: str, port: int, cert: str, key: str) -> None:
        self.cfg, self.host, self.port = cfg, host, port
        self.ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ssl.load_cert_chain(cert, key)  # fails here, at start, on a bad cert/key
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kubeprof-webhook", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._runner = web.AppRunner(make_app(self.cfg), access_log=None)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl)
            self._loop.run_until_complete(site.start())
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    def start(self) -> WebhookServer:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise OSError(f"webhook server on {self.host}:{self.port}: {self._error}")
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
