"""Which pod and container a process belongs to, read from its cgroup path.

The kubelet names a pod's cgroup after the pod UID, and the runtime names the container's
cgroup after the container id, so /proc/<pid>/cgroup answers "whose process is this"
without asking any API. Both drivers are understood:

  systemd:  /kubepods.slice/kubepods-burstable.slice/
            kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope
  cgroupfs: /kubepods/burstable/pod<uid>/<id>

Guaranteed-QoS pods have no QoS level (kubepods-pod<uid>.slice, /kubepods/pod<uid>).
Runtime prefixes seen in the wild: cri-containerd-, crio-, docker-, containerd-.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A pod UID in either spelling: dashes (cgroupfs) or underscores (systemd escapes "-").
_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
_POD = re.compile(rf"(?:^|/)(?:kubepods(?:-[a-z]+)?-)?pod({_UID})(?:\.slice)?(?:/|$)")
_SYSTEMD_CONTAINER = re.compile(
    r"^(?:cri-containerd|crio|docker|containerd)-([0-9a-f]{12,64})"
    r"\.scope$"
)
_CGROUPFS_CONTAINER = re.compile(r"^([0-9a-f]{12,64})$")


@dataclass(frozen=True, slots=True)
class PodRef:
    """The pod (and container, when the process sits in one) a cgroup path names."""

    pod_uid: str  # canonical, with dashes
    container_id: str  # runtime container id, "" for the pod sandbox level


def parse_path(path: str) -> PodRef | None:
    """PodRef for one cgroup path, or None when the path is not under a kubelet pod cgroup."""
    if "kubepods" not in path:
        return None
    m = _POD.search(path)
    if not m:
        return None
    uid = m.group(1).replace("_", "-")
    rest = path[m.end() :].split("/")
    container = ""
    for part in rest:
        c = _SYSTEMD_CONTAINER.match(part) or _CGROUPFS_CONTAINER.match(part)
        if c:
            container = c.group(1)
            break
    return PodRef(uid, container)


def parse_proc_cgroup(text: str) -> PodRef | None:
    """PodRef from the contents of /proc/<pid>/cgroup (v1, v2 or hybrid layout).

    The unified (0::) line is preferred; v1 controllers name the same path otherwise.
    """
    found: PodRef | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        ref = parse_path(parts[2])
        if ref is None:
            continue
        if parts[0] == "0":
            return ref
        if found is None or (ref.container_id and not found.container_id):
            found = ref
    return found


def cgroup_name(pod_uid: str, container_id: str, qos: str = "besteffort") -> str:
    """The systemd-driver cgroup path of a container (what tests create to stand for a pod)."""
    esc = pod_uid.replace("-", "_")
    return (
        f"kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{esc}.slice/"
        f"cri-containerd-{container_id}.scope"
    )
