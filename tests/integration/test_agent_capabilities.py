"""The agent's capability set, proven on real eBPF: exactly what the DaemonSet grants works,
and each capability in it is needed.

The probe (cap_probe.py: the real CpuCollector, bcc perf-event sampler plus py-spy) runs as
root with its bounding set cut to the DaemonSet's `capabilities.add` and no_new_privs set
(allowPrivilegeEscalation: false), as a container runtime starts the agent. The profiled
workload runs as root with every capability, as a pod's process looks to another pod.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kubeprof.operator.build import build_daemonset
from kubeprof.operator.config import OperatorConfig
from kubeprof.operator.spec import parse

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures" / "cpu"

pytestmark = [pytest.mark.bpf, pytest.mark.usefixtures("bpf_ready")]

SESSION = {"metadata": {"name": "caps", "namespace": "ml", "uid": "u"},
           "spec": {"target": {"namespace": "ml", "podSelector": {"matchLabels": {"a": "b"}}},
                    "duration": "1m"}}


def daemonset_caps() -> list[str]:
    """The capabilities the operator's DaemonSet grants on this machine's kernel."""
    import platform

    ds = build_daemonset(SESSION, parse(SESSION["spec"]), ["n"],
                         OperatorConfig(database_url=""), 1.0, kernels=[platform.release()])
    sc = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"]
    return sc["capabilities"]["add"]


def probe(caps: list[str], pid: int, seconds: float = 6.0) -> dict:
    allowed = ",".join(["-all", *(f"+{c.lower()}" for c in caps)])
    argv = ["setpriv", "--reuid=0", "--regid=0", "--clear-groups", "--no-new-privs",
            f"--bounding-set={allowed}", f"--inh-caps={allowed}",
            sys.executable, str(HERE / "cap_probe.py"), str(pid), str(seconds)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=HERE.parents[1])
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _cap_mask(caps: list[str]) -> int:
    bits = {"SYS_PTRACE": 19, "SYS_RESOURCE": 24, "SYSLOG": 34, "PERFMON": 38, "BPF": 39}
    return sum(1 << bits[c] for c in caps)


@pytest.fixture
def workload(python_exe):
    proc = subprocess.Popen([python_exe, str(FIXTURES / "hotcold.py"), "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_the_daemonsets_set_is_three_capabilities_on_this_kernel():
    # Kernel >= 5.11 charges BPF maps to the memory cgroup: no SYS_RESOURCE.
    assert daemonset_caps() == ["BPF", "PERFMON", "SYS_PTRACE"]


def test_exactly_the_granted_capabilities_profile_python_and_native_code(workload):
    caps = daemonset_caps()
    got = probe(caps, workload)
    assert int(got["cap_eff"], 16) == _cap_mask(caps), got  # nothing more than granted
    assert got["error"] is None, got
    # Thresholds leave room for a loaded machine; the runs lacking a capability get 0.
    assert got["samples"] >= 100, got
    assert got["python_hot"] >= 0.2 * got["samples"], got  # py-spy read the target
    assert got["native_named"] >= 0.2 * got["samples"], got  # ELF symbols via /proc/PID
    assert got["root_readable"], got  # a target's files, seen from another container


@pytest.mark.parametrize("missing", ["BPF", "PERFMON"])
def test_without_bpf_or_perfmon_the_sampler_cannot_load(workload, missing):
    caps = [c for c in daemonset_caps() if c != missing]
    got = probe(caps, workload, seconds=2)
    assert got["error"] is not None and got["samples"] == 0, got
    # ... and says which one is missing (root is not enough inside a container).
    assert f"CAP_{missing} missing, although running as root" in got["error"], got


def test_without_sys_ptrace_no_python_frames_and_no_access_to_other_containers_files(
        workload):
    caps = [c for c in daemonset_caps() if c != "SYS_PTRACE"]
    got = probe(caps, workload)
    assert got["samples"] >= 100, got  # the kernel still samples ...
    assert got["python_hot"] == 0, got  # ... but py-spy may not read the target's memory
    # ... nor may the agent open the target's binaries through /proc/PID/root, which is
    # how it symbolizes code in another container (here the host path happens to work).
    assert got["root_readable"] is False, got
