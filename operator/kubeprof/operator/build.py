"""Pure builders of the objects a session owns: its agent DaemonSet and its token Secret.

No API calls here: each function returns the object as a dict, so tests check exactly
what would be sent to the API server.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kubeprof.operator import agent_identity, owners
from kubeprof.operator.config import (
    KIND,
    LABEL_COMPONENT,
    LABEL_SESSION,
    LABEL_SHARD,
    TOKEN_KEY,
    OperatorConfig,
)
from kubeprof.operator.spec import Profilers, SessionSpec
from kubeprof.operator.webhook import CTL_SUBDIR, POD_SOCKET_DIR, RX_SUBDIR
from kubeprof.protocol import settings
from kubeprof.protocol.settings import (
    DEFAULT_SPOOL_DIR,
    AgentSettings,
)

TOKEN_MOUNT = "/var/run/kubeprof"
# Life of the agents' projected ServiceAccount token (the API server's minimum); the
# kubelet rewrites the file at 80 % of it and the agent reads it at every request.
AGENT_TOKEN_SECONDS = 600
# Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK, which bcc raises (needs
# SYS_RESOURCE); from 5.11 on maps are charged to the memory cgroup instead.
MEMCG_BPF_KERNEL = (5, 11)


def spool_folder(session: Mapping[str, Any]) -> str:
    """The session's spool folder name, as the agent names it (keyed by the session's UID:
    `kubeprof.protocol.settings.spool_folder`)."""
    meta = session["metadata"]
    return settings.spool_folder(meta["namespace"], meta["name"], meta.get("uid", ""))


def kernel_release(text: str) -> tuple[int, int] | None:
    """(major, minor) of a kernel release such as "5.15.0-91-generic"; None if unreadable."""
    parts = text.split(".", 2)
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1].split("-")[0] if ch.isdigit()))
    except (IndexError, ValueError):
        return None


def capabilities(config: OperatorConfig, kernels: Sequence[str] = ()) -> list[str]:
    """Capabilities the agent adds: the configured set, plus SYS_RESOURCE only when one of
    the nodes runs (or may run: unknown version) a kernel older than 5.11."""
    caps = list(config.agent_capabilities)
    old = any((kernel_release(k) or (0, 0)) < MEMCG_BPF_KERNEL for k in kernels)
    if old and "SYS_RESOURCE" not in caps:
        caps.append("SYS_RESOURCE")
    return caps


def label_value(name: str) -> str:
    """A label value for a session name (label values stop at 63 characters)."""
    if len(name) <= 63:
        return name
    return f"{name[:50]}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def child_name(session: str, suffix: str) -> str:
    """`kubeprof-<session>-<suffix>`, shortened with a hash to stay a valid DNS label."""
    full = f"kubeprof-{session}-{suffix}"
    if len(full) <= 55:  # DaemonSet pods add a 5-character suffix plus a dash
        return full
    digest = hashlib.sha256(session.encode()).hexdigest()[:8]
    keep = 55 - len("kubeprof--") - len(suffix) - 9
    return f"kubeprof-{session[:keep]}-{digest}-{suffix}"


def owned(obj: dict[str, Any], session: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` with a controller owner reference to the session, so Kubernetes deletes it too."""
    ref = owners.reference(KIND, session["metadata"], block_deletion=True)
    return owners.adopt(obj, ref)


def labels(session: Mapping[str, Any], component: str) -> dict[str, str]:
    return {
        LABEL_SESSION: label_value(session["metadata"]["name"]),
        LABEL_COMPONENT: component,
        "app.kubernetes.io/name": "kubeprof",
        "app.kubernetes.io/managed-by": "kubeprof-operator",
    }


def secret_name(session: Mapping[str, Any]) -> str:
    return child_name(session["metadata"]["name"], "ingest")


def daemonset_name(session: Mapping[str, Any], shard: int = 0) -> str:
    """Shard 0 is `kubeprof-<session>-agent` (the only one of most sessions), shard i
    `kubeprof-<session>-agent-<i>`."""
    return child_name(session["metadata"]["name"], "agent" if shard == 0 else f"agent-{shard}")


def agent_selector(session: Mapping[str, Any]) -> str:
    """Label selector of every agent DaemonSet (all shards) of the session."""
    return f"{LABEL_SESSION}={label_value(session['metadata']['name'])},{LABEL_COMPONENT}=agent"


def shard_of(ds: Mapping[str, Any]) -> int:
    """A DaemonSet's shard index from its label (0 when absent: one made before sharding)."""
    text = ((ds.get("metadata") or {}).get("labels") or {}).get(LABEL_SHARD, "0")
    return int(text) if text.isdigit() else 0


def build_secret(session: Mapping[str, Any], token: str) -> dict[str, Any]:
    """The Secret holding the session's ingest token (mounted into the agent pods)."""
    meta = session["metadata"]
    return owned(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": secret_name(session),
                "namespace": meta["namespace"],
                "labels": labels(session, "ingest-token"),
            },
            "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()},
        },
        session,
    )


def collectors_for(profilers: Profilers) -> list[str]:
    """Agent collectors the session's profilers section asks for."""
    out = []
    if profilers.cpu.enabled:
        out.append("cpu")
    if profilers.gpu.enabled:
        out.append("nvml")
    return out


def node_affinity(nodes: Sequence[str]) -> dict[str, Any]:
    """Required affinity to exactly `nodes`, by node name.

    `matchFields` on metadata.name (what the DaemonSet controller itself uses) takes one
    value per requirement, so each node is its own term; terms are ORed. Node names are
    exact, unlike the kubernetes.io/hostname label, which may differ from the name.
    """
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}
                    for n in sorted(set(nodes))
                ]
            }
        }
    }


def gpu_receiver(session: Mapping[str, Any]) -> str:
    """Where the session's agent receives injected tracers, in its container and in pods:
    ``/run/kubeprof/rx/<session uid>.sock``. One socket per session, so two sessions on a
    node never share (or steal) one; the uid keeps it under the 108-byte socket-path limit
    and is what the agent sends with ``on``/``off`` (gpu/control.py)."""
    return f"{POD_SOCKET_DIR}/{RX_SUBDIR}/{session['metadata']['uid']}.sock"


def gpu_tracer_wiring(
    session: Mapping[str, Any], spec: SessionSpec, config: OperatorConfig
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]] | None:
    """(env, mount, volume) that let the agent switch the injected tracers of its pods on,
    or None: no webhook (no folder configured) or the session does not ask for kernels."""
    gpu = spec.profilers.gpu
    host = config.agent_gpu_socket_host_path.rstrip("/")
    if not (host and gpu.enabled and gpu.kernel_tracing):
        return None
    # AgentSettings names the variables (it parses them in the agent); the pods'
    # control-socket folder is reached through /proc/<pid>/root (hostPID)
    env = [
        {"name": AgentSettings.env_name("gpu_socket"), "value": gpu_receiver(session)},
        {"name": AgentSettings.env_name("gpu_ctl_dir"), "value": f"{POD_SOCKET_DIR}/{CTL_SUBDIR}"},
    ]
    mount = {"name": "gpu-rx", "mountPath": f"{POD_SOCKET_DIR}/{RX_SUBDIR}"}
    return env, mount, _host("gpu-rx", f"{host}/{RX_SUBDIR}", "DirectoryOrCreate")


def token_volume(session: Mapping[str, Any], config: OperatorConfig) -> dict[str, Any]:
    """What the agent finds at TOKEN_MOUNT/token: its pod's own ServiceAccount token for the
    ingest audience (`--agent-auth serviceaccount`), else the session's shared Secret."""
    if config.agent_auth == "serviceaccount":
        source = {
            "audience": agent_identity.AUDIENCE,
            "expirationSeconds": AGENT_TOKEN_SECONDS,
            "path": TOKEN_KEY,
        }
        return {
            "name": "token",
            "projected": {"defaultMode": 0o400, "sources": [{"serviceAccountToken": source}]},
        }
    return {"name": "token", "secret": {"secretName": secret_name(session), "defaultMode": 0o400}}


def _host(name: str, path: str, kind: str = "Directory") -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, "type": kind}}


def build_daemonset(
    session: Mapping[str, Any],
    spec: SessionSpec,
    nodes: Sequence[str],
    config: OperatorConfig,
    end_time: float,
    kernels: Sequence[str] = (),
    shard: int = 0,
) -> dict[str, Any]:
    """Shard `shard` of the session's agent DaemonSets, pinned to `nodes` (non-empty).

    `kernels` are the nodes' kernel releases (Node status.nodeInfo.kernelVersion); they
    decide whether the agent needs SYS_RESOURCE (see `capabilities`). Each shard selects
    its own pods (the shard label is in its selector), so shards never claim each other's.
    """
    if not nodes:
        raise ValueError("an agent DaemonSet needs at least one node")
    meta = session["metadata"]
    cpu, gpu = spec.profilers.cpu, spec.profilers.gpu
    lbl = {**labels(session, "agent"), LABEL_SHARD: str(shard)}
    selector = {
        LABEL_SESSION: lbl[LABEL_SESSION],
        LABEL_COMPONENT: "agent",
        LABEL_SHARD: str(shard),
    }
    env = AgentSettings(
        ingest_url=config.ingest_url,
        namespace=meta["namespace"],
        session=meta["name"],
        session_uid=meta.get("uid", ""),
        token_file=Path(TOKEN_MOUNT) / TOKEN_KEY,
        end_time=end_time,
        collectors=tuple(collectors_for(spec.profilers)),
        cpu_hz=cpu.frequency_hz,
        offcpu_min_us=cpu.offcpu_min_us,
        offcpu_every=cpu.offcpu_every,
        nvml_interval_s=gpu.metrics_interval_ms / 1000,
        proc_root=Path("/proc"),
        spool_dir=DEFAULT_SPOOL_DIR,
    ).to_env()
    container: dict[str, Any] = {
        "name": "agent",
        "image": config.agent_image,
        "imagePullPolicy": config.agent_image_pull_policy,
        "command": ["kubeprof", "agent"],
        "env": env,
        "resources": {
            "requests": {"cpu": config.agent_cpu, "memory": config.agent_memory},
            "limits": {"cpu": config.agent_cpu, "memory": config.agent_memory},
        },
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsUser": 0,  # capabilities below are granted to root only
            "capabilities": {"add": capabilities(config, kernels), "drop": ["ALL"]},
            # containerd's RuntimeDefault allows bpf() with CAP_BPF and perf_event_open()
            # with CAP_PERFMON (older runtimes only with SYS_ADMIN: --agent-seccomp).
            "seccompProfile": {"type": config.agent_seccomp},
        },
        "volumeMounts": [
            {"name": "token", "mountPath": TOKEN_MOUNT, "readOnly": True},
            {"name": "tracefs", "mountPath": "/sys/kernel/tracing", "readOnly": True},
            {"name": "modules", "mountPath": "/lib/modules", "readOnly": True},
            {"name": "usr-src", "mountPath": "/usr/src", "readOnly": True},
            # Only this session's folder of the host's spool: the agent sees no other's.
            {"name": "spool", "mountPath": f"{DEFAULT_SPOOL_DIR}/{spool_folder(session)}"},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    pod_spec: dict[str, Any] = {
        # See every process on the node (pods are told apart by cgroup): with hostPID the
        # container's own /proc is the host's process list, so the host /proc is not mounted.
        "hostPID": True,
        "affinity": node_affinity(nodes),
        "tolerations": [{"operator": "Exists"}],  # GPU nodes are often tainted
        "terminationGracePeriodSeconds": 60,  # time to flush the last batches
        "automountServiceAccountToken": False,  # no API token: only the ingest-audience one
        "containers": [container],
        "volumes": [
            token_volume(session, config),
            _host("tracefs", "/sys/kernel/tracing"),
            _host("modules", "/lib/modules"),
            _host("usr-src", "/usr/src"),
            _host(
                "spool",
                f"{config.agent_spool_host_path}/{spool_folder(session)}",
                "DirectoryOrCreate",
            ),
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    wiring = gpu_tracer_wiring(session, spec, config)
    if wiring is not None:
        gpu_env, gpu_mount, gpu_volume = wiring
        container["env"] = [*env, *gpu_env]
        container["volumeMounts"].append(gpu_mount)
        pod_spec["volumes"].append(gpu_volume)
    if config.agent_service_account:
        pod_spec["serviceAccountName"] = config.agent_service_account
    # Chart values (`agent.*`), passed as operator flags, replace the built-in defaults.
    if config.agent_tolerations is not None:
        pod_spec["tolerations"] = [dict(t) for t in config.agent_tolerations]
    if config.agent_priority_class:
        pod_spec["priorityClassName"] = config.agent_priority_class
    if config.agent_security_context is not None:
        container["securityContext"] = dict(config.agent_security_context)
    return owned(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {
                "name": daemonset_name(session, shard),
                "namespace": meta["namespace"],
                "labels": lbl,
            },
            "spec": {
                "selector": {"matchLabels": selector},
                # OnDelete: changing the node list must not restart agents already running.
                "updateStrategy": {"type": "OnDelete"},
                "template": {"metadata": {"labels": lbl}, "spec": pod_spec},
            },
        },
        session,
    )
