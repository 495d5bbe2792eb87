"""What /proc says about a process: state, parent, name, command line, descendants."""

from __future__ import annotations

import os

from kubeprof.model import ProcessInfo

CMDLINE_MAX = 1000


def stat_fields(pid: int, proc: str = "/proc") -> tuple[str, str, int] | None:
    """(comm, state, ppid) of a pid, or None if it is gone."""
    try:
        with open(f"{proc}/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    comm = text[text.find("(") + 1 : text.rfind(")")]
    rest = text[text.rfind(")") + 2 :].split()
    return comm, rest[0], int(rest[1])


def is_alive(pid: int, proc: str = "/proc") -> bool:
    """Running or sleeping, not a zombie waiting to be reaped."""
    st = stat_fields(pid, proc)
    return st is not None and st[1] not in ("Z", "X")


def process_info(pid: int, proc: str = "/proc") -> ProcessInfo | None:
    """A ProcessInfo from /proc, or None if the process is gone."""
    st = stat_fields(pid, proc)
    if st is None:
        return None
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            cmdline = f.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        cmdline = ""
    return ProcessInfo(pid=pid, ppid=st[2], name=st[0], cmdline=cmdline[:CMDLINE_MAX])


def exe(pid: int, proc: str = "/proc") -> str:
    """The path of the pid's executable, "" if unknown."""
    try:
        return os.readlink(f"{proc}/{pid}/exe")
    except OSError:
        return ""


def descendants(pid: int, proc: str = "/proc") -> set[int]:
    """Every live process below pid (children forked before we attached)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir(proc):
        if name.isdigit():
            st = stat_fields(int(name), proc)
            if st is not None:
                children.setdefault(st[2], []).append(int(name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def is_tgid(pid: int, proc: str = "/proc") -> bool:
    """Whether a kernel task id is a process (thread-group leader), not a thread."""
    try:
        with open(f"{proc}/{pid}/status") as f:
            for line in f:
                if line.startswith("Tgid:"):
                    return int(line.split()[1]) == pid
    except OSError:
        pass
    return False


def tgid_of(tid: int, proc: str = "/proc") -> int | None:
    """The process a thread id belongs to (None when it is gone)."""
    try:
        with open(f"{proc}/{tid}/status") as f:
            for line in f:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def comm(tid: int, proc: str = "/proc") -> str:
    """A thread's name ("" when it is gone)."""
    try:
        with open(f"{proc}/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""
