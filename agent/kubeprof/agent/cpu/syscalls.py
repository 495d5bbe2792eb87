"""x86-64 syscall numbers of the calls a thread blocks in, by name, for off-CPU reasons.

Only the calls that wait (and a few that often show up under a wait) are named; any other
number reads as ``syscall <nr>``, which is still exact (ausyscall(8) names it).
"""

from __future__ import annotations

_X86_64 = {
    0: "read",
    1: "write",
    3: "close",
    7: "poll",
    9: "mmap",
    16: "ioctl",
    17: "pread64",
    18: "pwrite64",
    19: "readv",
    20: "writev",
    23: "select",
    24: "sched_yield",
    34: "pause",
    35: "nanosleep",
    42: "connect",
    43: "accept",
    44: "sendto",
    45: "recvfrom",
    46: "sendmsg",
    47: "recvmsg",
    56: "clone",
    57: "fork",
    58: "vfork",
    59: "execve",
    61: "wait4",
    62: "kill",
    74: "fsync",
    75: "fdatasync",
    128: "rt_sigtimedwait",
    130: "rt_sigsuspend",
    202: "futex",
    208: "io_getevents",
    230: "clock_nanosleep",
    232: "epoll_wait",
    247: "waitid",
    257: "openat",
    262: "newfstatat",
    332: "statx",
    270: "pselect6",
    271: "ppoll",
    281: "epoll_pwait",
    288: "accept4",
    299: "recvmmsg",
    307: "sendmmsg",
    426: "io_uring_enter",
    435: "clone3",
    441: "epoll_pwait2",
    449: "futex_waitv",
}


def syscall_name(nr: int) -> str:
    """The name of x86-64 syscall `nr`, or ``syscall <nr>``."""
    return _X86_64.get(nr) or f"syscall {nr}"
