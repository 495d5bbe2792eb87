"""Pod UID and container id from cgroup paths, for both kubelet cgroup drivers."""

from kubeprof.agent.cluster.cgroups import cgroup_name, parse_path, parse_proc_cgroup

UID = "0d3c7e8a-1f2b-4c5d-9e8f-a1b2c3d4e5f6"
CID = "4f1c2a7e9b" * 6 + "abcd"


def test_systemd_driver_besteffort():
    path = (
        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
        f"{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope"
    )
    ref = parse_path(path)
    assert ref is not None and (ref.pod_uid, ref.container_id) == (UID, CID)


def test_systemd_guaranteed_crio_and_docker():
    esc = UID.replace("-", "_")
    for prefix in ("crio", "docker", "cri-containerd"):
        ref = parse_path(f"/kubepods.slice/kubepods-pod{esc}.slice/{prefix}-{CID}.scope")
        assert ref is not None and (ref.pod_uid, ref.container_id) == (UID, CID)


def test_cgroupfs_driver():
    ref = parse_path(f"/kubepods/burstable/pod{UID}/{CID}")
    assert ref is not None and (ref.pod_uid, ref.container_id) == (UID, CID)
    ref = parse_path(f"/kubepods/pod{UID}/{CID}")
    assert ref is not None and ref.pod_uid == UID


def test_pod_level_without_container():
    ref = parse_path(f"/kubepods/besteffort/pod{UID}")
    assert ref is not None and (ref.pod_uid, ref.container_id) == (UID, "")


def test_relative_path_seen_from_a_private_cgroup_namespace():
    esc = UID.replace("-", "_")
    ref = parse_path(f"/../../kubepods-besteffort-pod{esc}.slice/cri-containerd-{CID}.scope")
    assert ref is not None and ref.pod_uid == UID


def test_not_a_pod():
    for p in (
        "/",
        "/system.slice/sshd.service",
        "/user.slice/user-0.slice",
        "/kubepods.slice",
        "/kubepods/besteffort/podnot-a-uid/x",
    ):
        assert parse_path(p) is None


def test_proc_cgroup_v2_and_hybrid_prefer_unified():
    esc = UID.replace("-", "_")
    v2 = (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{esc}.slice/"
        f"cri-containerd-{CID}.scope\n"
    )
    assert parse_proc_cgroup(v2).container_id == CID
    v1 = (
        f"12:memory:/kubepods/burstable/pod{UID}/{CID}\n"
        f"11:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n0::/\n"
    )
    assert parse_proc_cgroup(v1).pod_uid == UID
    assert parse_proc_cgroup("0::/init.scope\n1:name=systemd:/\n") is None


def test_cgroup_name_round_trips():
    ref = parse_path("/" + cgroup_name(UID, CID))
    assert ref is not None and (ref.pod_uid, ref.container_id) == (UID, CID)
