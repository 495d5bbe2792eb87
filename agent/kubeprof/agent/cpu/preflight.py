"""Checks before loading BPF, each failing with one line that names the cause and the fix.

bcc's own failures are long compiler logs or bare errno values; the user of
`kubeprof record` needs to know which of a handful of set-up problems it is. The checks
take their inputs as arguments (filesystem root, capabilities) so tests can run them.
"""

from __future__ import annotations

import os
import platform

CAP_SYS_ADMIN = 21
CAP_PERFMON = 38
CAP_BPF = 39

SETUP_HINT = "run scripts/setup-ebpf.sh as root"


def effective_caps(status_text: str) -> int:
    """The CapEff bit mask from a /proc/PID/status text (0 if absent)."""
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def permission_problem(euid: int, cap_eff: int) -> str | None:
    """Why this process may not load perf-event BPF programs, or None."""

    def has(cap: int) -> bool:
        return bool(cap_eff >> cap & 1)

    # Capabilities decide, not the uid: root in a container has only the ones granted.
    if has(CAP_SYS_ADMIN) or (has(CAP_BPF) and has(CAP_PERFMON)):
        return None
    missing = " and ".join(
        n for n, c in (("CAP_BPF", CAP_BPF), ("CAP_PERFMON", CAP_PERFMON)) if not has(c)
    )
    return (
        f"no permission to load BPF programs ({missing} missing"
        f"{', although running as root' if euid == 0 else ''}): run as root (sudo) or grant "
        "CAP_BPF+CAP_PERFMON (setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep, or the pod's "
        "securityContext.capabilities)"
    )


def headers_problem(root: str, kernel_release: str) -> str | None:
    """Missing kernel headers (bcc compiles the program against them), or None."""
    build = os.path.join(root, "lib/modules", kernel_release, "build")
    if os.path.exists(os.path.join(build, "Makefile")):
        return None
    if os.path.exists(os.path.join(root, "sys/kernel/kheaders.tar.xz")):
        return None  # CONFIG_IKHEADERS: bcc unpacks these itself
    return (
        f"missing kernel headers for {kernel_release} (no /lib/modules/{kernel_release}/build):"
        f" {SETUP_HINT}, or apt-get install linux-headers-{kernel_release}"
        " (in a pod: mount the host's /lib/modules and /usr/src)"
    )


def tracefs_problem(root: str) -> str | None:
    """tracefs not mounted (tracepoints and uprobes need it), or None."""
    for d in ("sys/kernel/tracing", "sys/kernel/debug/tracing"):
        if os.path.isdir(os.path.join(root, d, "events")):
            return None
    return (
        "tracefs is not mounted: mount -t tracefs nodev /sys/kernel/tracing "
        f"(or {SETUP_HINT}; in a pod: mount the host's /sys/kernel/tracing)"
    )


def bcc_problem() -> str | None:
    """bcc's Python binding not importable, or None."""
    try:
        import bcc  # noqa: F401
    except ImportError:
        return (
            "bcc is not importable: apt-get install python3-bpfcc and use a virtualenv made "
            "with --system-site-packages from Debian's python3"
        )
    return None


def check_environment(root: str = "/") -> str | None:
    """The first set-up problem of this machine, or None when BPF should load."""
    try:
        with open("/proc/self/status") as f:
            caps = effective_caps(f.read())
    except OSError:
        caps = ~0 if os.geteuid() == 0 else 0  # unreadable: trust root, as before
    return (
        permission_problem(os.geteuid(), caps)
        or bcc_problem()
        or headers_problem(root, platform.release())
        or tracefs_problem(root)
    )


def pid_problem(pid: int, proc: str = "/proc") -> str | None:
    """Why pid cannot be profiled (unknown, or already exited), or None."""
    try:
        with open(f"{proc}/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return f"no process with PID {pid}: check the PID (ps -p {pid}) or start the command"
    if state in ("Z", "X"):
        return (
            f"process {pid} has already exited: nothing to profile "
            "(give a running PID, or a command that runs longer)"
        )
    return None


def explain_load_error(err: BaseException) -> str:
    """One line for an exception bcc raised while compiling or attaching."""
    text = str(err)
    if isinstance(err, PermissionError) or "Operation not permitted" in text:
        return permission_problem(1, 0) or text
    if "kconfig.h" in text or ("linux/" in text and "not found" in text):
        return headers_problem("/", platform.release()) or (
            f"kernel headers do not fit this kernel: {SETUP_HINT}"
        )
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return f"could not load the BPF CPU sampler ({first}): {SETUP_HINT} and check dmesg"
