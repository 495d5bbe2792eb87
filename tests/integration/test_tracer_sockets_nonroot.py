"""Injected tracers of non-root pods, switched by an agent with only its DaemonSet's
capabilities, over real sockets in real mount namespaces.

Each pod process runs as uid 1000 in its own mount namespace, where (as the webhook's
patch mounts them) its pod's own folder is at the control-socket path and the node's rx/
folder is bound read-only. The agent probe runs as root with its bounding set cut to the
DaemonSet's capabilities (no CAP_DAC_OVERRIDE, no CAP_DAC_READ_SEARCH), in the host's mount
namespace: it must find each pod's socket through /proc/<pid>/root, switch it on, and get
the pod's kernels on its receiver, attributed to the host pid; the pods must not be able to
plant a receiver.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeprof.agent.gpu.inject import package_roots

HERE = Path(__file__).resolve().parent
UID = 1000

pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"),
        reason="needs root, unshare and setpriv (mount namespaces, a non-root uid)",
    ),
    pytest.mark.serial,  # changes the modes of folders above the Python for its duration
]


def daemonset_caps() -> list[str]:
    from tests.integration.test_agent_capabilities import daemonset_caps as caps

    return caps()


@pytest.fixture
def reachable() -> Iterator[None]:
    """Let uid 1000 reach this checkout's Python (a checkout under a 0700 folder, such as
    `mktemp -d` makes, would refuse it): folders on the way get the others' search bit
    (not read) for the test, and get their mode back after."""
    import stat

    needed = [HERE / "tracer_pod_child.py", Path(sys.executable), Path(sys.prefix)]
    needed += [Path(p) for p in package_roots()]
    changed: dict[Path, int] = {}
    for path in needed:
        for folder in [*reversed(path.parents), *([path] if path.is_dir() else [])]:
            mode = stat.S_IMODE(folder.stat().st_mode)
            if folder not in changed and not mode & stat.S_IXOTH:
                changed[folder] = mode
                folder.chmod(mode | stat.S_IXOTH)
    try:
        yield
    finally:
        for folder, mode in changed.items():
            folder.chmod(mode)


@pytest.fixture
def node(reachable: None) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))  # short: socket paths <= 108
    root.chmod(0o755)
    (root / "rx").mkdir(mode=0o755)  # the node's rx/ folder: root's, as kubelet creates it
    for d in ("mnt/ctl", "mnt/rx"):  # mount points of the pod view
        (root / d).mkdir(parents=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def start_pod(node: Path, name: str) -> subprocess.Popen[str]:
    """A pod process: its emptyDir (0777, like the kubelet's) at mnt/ctl, rx/ read-only."""
    empty = node / "pods" / name
    empty.mkdir(parents=True)
    empty.chmod(0o777)
    ctl, rx = node / "mnt" / "ctl", node / "mnt" / "rx"
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.pathsep.join([*package_roots(), str(HERE.parents[1])]),
        "KUBEPROF_GPU_SOCKET": f"{rx}/gpu.sock",
        "KUBEPROF_GPU_DORMANT": "1",
        "KUBEPROF_GPU_CTL_DIR": str(ctl),
        "KUBEPROF_GPU_KINDS": "kernel",
        "KUBEPROF_GPU_FLUSH_MS": "100",
        "KUBEPROF_POD_UID": name,
        # The fake CUPTI is a Python module: the C launch hook (built by make setup) would
        # look for the real libcupti's cuptiSubscribe and refuse to start.
        "KUBEPROF_GPU_HOOK": "python",
    }
    script = (
        f"mount --bind {empty} {ctl} && mount --bind {node / 'rx'} {rx} && "
        f"mount -o remount,bind,ro {rx} && exec setpriv --reuid={UID} --regid={UID} "
        f'--clear-groups --no-new-privs --inh-caps=-all --bounding-set=-all "$@"'
    )
    child = subprocess.Popen(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            sys.executable,
            str(HERE / "tracer_pod_child.py"),
        ],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return child


def test_nonroot_pods_are_switched_and_traced_by_an_agent_without_dac_override(
    node: Path,
) -> None:
    pods = {"pod-a": start_pod(node, "pod-a"), "pod-b": start_pod(node, "pod-b")}
    try:
        seen = {}
        for name, child in pods.items():
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line, child.stderr.read() if child.stderr else ""
            seen[name] = json.loads(line)
        for name, got in seen.items():
            assert got["uid"] == UID and got["dormant"], got
            assert got["planted"] == "EROFS", got  # rx/ is read-only in pods
            [sock] = got["ctl"]  # its own socket, created by uid 1000 in the emptyDir
            assert sock.endswith(".sock")
            assert (node / "pods" / name / sock).stat().st_uid == UID
        # The pod's processes, as the agent finds them by cgroup (pid -> pod uid).
        pids = {str(c.pid): name for name, c in pods.items()}
        caps = daemonset_caps()
        allowed = ",".join(["-all", *(f"+{c.lower()}" for c in caps)])
        r = subprocess.run(
            [
                "setpriv",
                "--reuid=0",
                "--regid=0",
                "--clear-groups",
                "--no-new-privs",
                f"--bounding-set={allowed}",
                f"--inh-caps={allowed}",
                sys.executable,
                str(HERE / "tracer_agent_probe.py"),
                str(node / "rx" / "sess-1.sock"),
                str(node / "mnt" / "ctl"),
                json.dumps({k: v for k, v in pids.items() if v == "pod-a"}),
                "1.5",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=HERE.parents[1],
        )
        assert r.returncode == 0, r.stderr[-3000:]
        got = json.loads(r.stdout.strip().splitlines()[-1])
        cap_eff = int(got["cap_eff"], 16)
        assert not cap_eff & (1 << 1) and not cap_eff & (1 << 2), got  # no DAC_OVERRIDE/READ_SEARCH
        a_pid = pods["pod-a"].pid
        assert got["on"] == [f"pod-a/{seen['pod-a']['ctl'][0]}"], got
        assert got["refused"] == {}, got
        assert got["states"] == [["pod-a", a_pid, "off"]], got  # on, then off at the end
        # Kernels of the uid-1000 process, attributed to its pid as the kernel names it.
        assert set(got["kernels"]) == {str(a_pid)} and got["kernels"][str(a_pid)] >= 5, got
    finally:
        done = {}
        for name, child in pods.items():
            if child.stdin is not None:
                child.stdin.close()
            out = child.stdout.read() if child.stdout else ""
            err = child.stderr.read() if child.stderr else ""
            done[name] = (child.wait(30), out, err)
            for pipe in (child.stdout, child.stderr):
                if pipe is not None:
                    pipe.close()  # an open pipe warns when collected: warnings are errors
    for name, (rc, out, err) in done.items():
        assert rc == 0, err
        launched = json.loads(out.strip().splitlines()[-1])["launched"]
        # pod-b was never selected: dormant throughout, never launched a traced kernel
        assert (launched > 0) is (name == "pod-a"), (name, out, err)
