"""Load an OCI seccomp profile (as runc does from a container's config.json), then exec ARGV.

Usage: python seccomp_exec.py PROFILE.json -- COMMAND [ARGS...]
The profile is containerd's RuntimeDefault for the agent's capabilities
(tests/fixtures/seccomp/gen prints it from containerd's own DefaultProfile). Needs the
libseccomp binding (Debian: python3-seccomp).
"""

import contextlib
import errno
import json
import os
import sys

import seccomp

OPS = {
    "SCMP_CMP_EQ": seccomp.EQ,
    "SCMP_CMP_NE": seccomp.NE,
    "SCMP_CMP_LT": seccomp.LT,
    "SCMP_CMP_LE": seccomp.LE,
    "SCMP_CMP_GT": seccomp.GT,
    "SCMP_CMP_GE": seccomp.GE,
    "SCMP_CMP_MASKED_EQ": seccomp.MASKED_EQ,
}


def _action(name: str, errno_ret: int | None):
    if name == "SCMP_ACT_ALLOW":
        return seccomp.ALLOW
    if name == "SCMP_ACT_ERRNO":
        return seccomp.ERRNO(errno.EPERM if errno_ret is None else errno_ret)
    raise ValueError(f"action {name} not handled")


def build(profile: dict) -> seccomp.SyscallFilter:
    f = seccomp.SyscallFilter(
        defaction=_action(profile["defaultAction"], profile.get("defaultErrnoRet"))
    )
    for rule in profile["syscalls"]:
        action = _action(rule["action"], rule.get("errnoRet"))
        # OCI/runc: for MASKED_EQ, "value" is the mask and "valueTwo" the datum.
        args = [
            seccomp.Arg(a["index"], OPS[a["op"]], a["value"], a.get("valueTwo", 0))
            for a in rule.get("args") or []
        ]
        for name in rule["names"]:
            # Not a syscall of this architecture / libseccomp: runc skips it too.
            with contextlib.suppress(RuntimeError, ValueError):
                f.add_rule(action, name, *args)
    return f


def main() -> None:
    path, sep, *argv = sys.argv[1:]
    assert sep == "--" and argv, __doc__
    with open(path) as fh:
        build(json.load(fh)).load()
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
