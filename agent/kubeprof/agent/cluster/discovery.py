"""Target pods -> their processes on this node, by scanning /proc.

The agent runs with hostPID, so /proc lists every process on the node; a process belongs
to a target when its cgroup names one of the target pods' UIDs. Processes come and go (a
container restarts, a DataLoader forks workers), so the scan is repeated on a timer and
reports only what is new.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kubeprof.agent.cluster.cgroups import PodRef, parse_proc_cgroup
from kubeprof.model import ProcessInfo

CMDLINE_MAX = 512  # characters of argv kept per process


@dataclass
class Discovery:
    """Finds processes of `targets` (pod UIDs) under `proc_root`; remembers what it saw."""

    proc_root: Path = Path("/proc")
    seen: dict[int, ProcessInfo] = field(default_factory=dict)

    def scan(self, targets: Iterable[str]) -> list[ProcessInfo]:
        """Processes of the target pods not reported before (pid reuse counts as new)."""
        wanted = {t.lower() for t in targets}
        if not wanted:
            return []
        self_pid = os.getpid()
        new: list[ProcessInfo] = []
        try:
            entries = list(os.scandir(self.proc_root))
        except OSError:
            return []
        for entry in entries:
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            if pid == self_pid:
                continue
            ref = self.pod_of(pid)
            if ref is None or ref.pod_uid not in wanted:
                continue
            info = self._info(pid, ref)
            if info is None:
                continue
            old = self.seen.get(pid)
            if old is None or old.name != info.name or old.pod_uid != info.pod_uid:
                self.seen[pid] = info
                new.append(info)
        return new

    def live(self) -> list[int]:
        """Known target PIDs that still exist (and forget the others)."""
        gone = [p for p in self.seen if not (self.proc_root / str(p)).exists()]
        for p in gone:
            del self.seen[p]
        return list(self.seen)

    def pod_of(self, pid: int) -> PodRef | None:
        """The pod a PID belongs to, from its cgroup (None: not a pod process, or gone)."""
        try:
            text = (self.proc_root / str(pid) / "cgroup").read_text()
        except OSError:  # exited, or a kernel thread we may not read
            return None
        return parse_proc_cgroup(text)

    def describe(self, pid: int) -> ProcessInfo | None:
        """ProcessInfo of any PID, with its pod identity when it runs in a pod."""
        return self._info(pid, self.pod_of(pid) or PodRef("", ""))

    def _info(self, pid: int, ref: PodRef) -> ProcessInfo | None:
        base = self.proc_root / str(pid)
        try:
            stat = (base / "stat").read_text()
            cmdline = (base / "cmdline").read_bytes()
        except OSError:
            return None
        # comm may hold spaces and parentheses: it lies between the first "(" and last ")".
        name = stat[stat.find("(") + 1 : stat.rfind(")")]
        fields = stat[stat.rfind(")") + 2 :].split()
        ppid = int(fields[1]) if len(fields) > 1 else 0
        argv = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
        return ProcessInfo(
            pid=pid,
            ppid=ppid,
            name=name,
            cmdline=argv[:CMDLINE_MAX],
            container_id=ref.container_id,
            pod_uid=ref.pod_uid,
        )
