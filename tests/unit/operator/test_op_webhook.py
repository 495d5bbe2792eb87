"""The injection patch (kubeprof.operator.webhook): what an opted-in pod comes back with."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from kubeprof.operator.webhook import (
    ANNOTATION,
    INIT_NAME,
    InjectConfig,
    ReviewError,
    build_patch,
    review_response,
)

CFG = InjectConfig(image="reg/kubeprof-agent:1")


def apply(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 'add' (the only op the webhook emits), strict about missing parents."""
    out = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] == "add"
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]
        ]
        node: Any = out
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if isinstance(node, list):
            if last == "-":
                node.append(op["value"])
            else:
                node.insert(int(last), op["value"])
        else:
            node[last] = op["value"]
    return out


def pod(**spec: Any) -> dict[str, Any]:
    base = {"containers": [{"name": "main", "image": "python:3.12"}]}
    base.update(spec)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "labels": {"app": "x"}},
        "spec": base,
    }


def env_of(c: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def test_bare_pod_gets_init_container_env_and_volumes() -> None:
    out = apply(pod(), build_patch(pod(), CFG))
    init = out["spec"]["initContainers"][0]
    assert init["name"] == INIT_NAME and init["image"] == CFG.image
    vols = {v["name"]: v for v in out["spec"]["volumes"]}
    assert vols["kubeprof-tracer"] == {"name": "kubeprof-tracer", "emptyDir": {}}
    # Only the receivers' folder of the node; the control sockets live in the pod's own
    # emptyDir, which no other pod sees.
    assert vols["kubeprof-gpu-socket"]["hostPath"]["path"] == "/run/kubeprof/rx"
    assert vols["kubeprof-gpu-ctl"] == {"name": "kubeprof-gpu-ctl", "emptyDir": {}}
    main = out["spec"]["containers"][0]
    env = env_of(main)
    assert env["PYTHONPATH"].split(":")[0] == CFG.site_dir
    assert env["KUBEPROF_GPU_SOCKET"] == "/run/kubeprof/rx/gpu.sock"
    assert env["KUBEPROF_GPU_CTL_DIR"] == "/run/kubeprof/ctl"
    assert env["KUBEPROF_GPU_DORMANT"] == "1"
    mounts = {m["name"]: m for m in main["volumeMounts"]}
    assert mounts["kubeprof-tracer"]["readOnly"] is True
    # read-only: a pod may connect to a receiver but never bind or replace one
    assert mounts["kubeprof-gpu-socket"] == {
        "name": "kubeprof-gpu-socket",
        "mountPath": "/run/kubeprof/rx",
        "readOnly": True,
    }
    assert mounts["kubeprof-gpu-ctl"] == {
        "name": "kubeprof-gpu-ctl",
        "mountPath": "/run/kubeprof/ctl",
    }
    assert out["metadata"]["annotations"][ANNOTATION] == "dormant"


def test_existing_lists_are_appended_to_and_user_values_kept() -> None:
    p = pod(
        initContainers=[{"name": "setup", "image": "busybox"}],
        volumes=[{"name": "data", "emptyDir": {}}],
        containers=[
            {
                "name": "a",
                "image": "i",
                "env": [{"name": "PYTHONPATH", "value": "/app"}, {"name": "X", "value": "1"}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            },
            {"name": "b", "image": "i"},
        ],
    )
    p["metadata"]["annotations"] = {"keep": "me"}
    out = apply(p, build_patch(p, CFG))
    assert [c["name"] for c in out["spec"]["initContainers"]] == [INIT_NAME, "setup"]
    assert [v["name"] for v in out["spec"]["volumes"]] == [
        "data",
        "kubeprof-tracer",
        "kubeprof-gpu-ctl",
        "kubeprof-gpu-socket",
    ]
    a, b = out["spec"]["containers"]
    assert env_of(a)["PYTHONPATH"] == f"{CFG.site_dir}:{CFG.mount_path}/lib:/app"
    assert env_of(a)["X"] == "1"
    assert [m["name"] for m in a["volumeMounts"]] == [
        "data",
        "kubeprof-tracer",
        "kubeprof-gpu-ctl",
        "kubeprof-gpu-socket",
    ]
    assert env_of(b)["KUBEPROF_GPU_SOCKET"] == CFG.socket
    assert out["metadata"]["annotations"]["keep"] == "me"


def test_opted_out_and_already_injected_pods_get_no_patch() -> None:
    p = pod()
    p["metadata"]["labels"]["kubeprof.dev/inject"] = "false"
    assert build_patch(p, CFG) == []
    once = apply(pod(), build_patch(pod(), CFG))
    assert build_patch(once, CFG) == []


def test_review_answers_allowed_with_a_patch_for_pod_creates() -> None:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "kind": {"kind": "Pod"}, "operation": "CREATE", "object": pod()},
    }
    resp = review_response(review, CFG)["response"]
    assert resp["uid"] == "u1" and resp["allowed"] is True
    assert resp["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(resp["patch"])) == build_patch(pod(), CFG)
    review["request"]["operation"] = "UPDATE"
    assert "patch" not in review_response(review, CFG)["response"]


@pytest.mark.parametrize(
    ("body", "field"),
    [({}, "body.request"), ([], "body.request"), ({"request": {}}, "body.request.uid")],
)
def test_malformed_review_names_the_field(body: Any, field: str) -> None:
    with pytest.raises(ReviewError, match=field.replace(".", r"\.")):
        review_response(body, CFG)


def test_init_container_copy_is_enough_for_a_python_without_kubeprof(tmp_path) -> None:
    """Run the init container's command, then a Python that has no kubeprof installed
    (Debian's /usr/bin/python3) with exactly the patched container env: the tracer loads
    at interpreter start, dormant, and listens on its control socket."""
    import os
    import shutil
    import subprocess
    import sys

    bare = shutil.which("python3", path="/usr/bin")
    if (
        bare is None
        or subprocess.run([bare, "-c", "import kubeprof"], capture_output=True).returncode == 0
    ):
        pytest.skip("needs a python3 without kubeprof installed at /usr/bin")
    cfg = InjectConfig(
        image="i",
        mount_path=str(tmp_path / "kp"),
        socket_mount_path=str(tmp_path / "run"),
        python=sys.executable,
    )
    out = apply(pod(), build_patch(pod(), cfg))
    init = out["spec"]["initContainers"][0]
    subprocess.run(init["command"], check=True, capture_output=True)
    env = {"PATH": os.environ["PATH"]}
    for e in out["spec"]["containers"][0]["env"]:
        env[e["name"]] = e.get("value") or "uid-x"  # valueFrom: the kubelet fills the uid
    code = (
        "import pathlib, sys\n"
        "import kubeprof.agent.gpu.tracer, kubeprof.agent.gpu.wire  # what 'on' imports\n"
        f"d = pathlib.Path({str(tmp_path / 'run' / 'ctl')!r})\n"
        "print(sorted(p.name for p in d.iterdir()), 'kubeprof' in sys.modules)\n"
    )
    r = subprocess.run([bare, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("]")[0].count(".sock") == 1 and r.stdout.strip().endswith("True")


def test_operator_flags_a_cert_without_its_key() -> None:
    from kubeprof.operator.main import _start_webhook, build_config, build_parser

    args = build_parser().parse_args(["--webhook-tls-cert", "/tls/tls.crt"])
    with pytest.raises(SystemExit, match="--webhook-tls-key"):
        _start_webhook(args, build_config(args))
    off = build_parser().parse_args([])
    assert _start_webhook(off, build_config(off)) is None  # no cert: no webhook
