"""A memory cgroup around a running process, as the chart's `resources.limits.memory` is.

Past the limit the kernel's OOM killer ends the process, exactly as the kubelet's cgroup
would: a test that survives under it survives in the chart. cgroup v2 (`memory.max`) where
its memory controller is enabled, else cgroup v1 (`memory.limit_in_bytes`, with the pages
the process holds already moved in); swap is capped too so the limit cannot be dodged.
`peak()` reads the high-water mark the kernel kept.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

V1 = Path("/sys/fs/cgroup/memory")


def _v2_root() -> Path | None:
    for p in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        ctl = p / "cgroup.subtree_control"
        if ctl.exists() and "memory" in ctl.read_text().split():
            return p
    return None


@dataclass
class MemoryCap:
    """One cgroup holding one process under `limit` bytes; `remove()` when done."""

    path: Path
    v2: bool

    @classmethod
    def around(cls, pid: int, limit: int) -> MemoryCap:
        name = f"kubeprof-e2e-{uuid.uuid4().hex[:8]}"
        root = _v2_root()
        if root is not None:
            cap = cls(root / name, True)
            cap.path.mkdir()
            (cap.path / "memory.max").write_text(str(limit))
            with contextlib.suppress(OSError):
                (cap.path / "memory.swap.max").write_text("0")
        elif (V1 / "memory.limit_in_bytes").exists():
            cap = cls(V1 / name, False)
            cap.path.mkdir()
            (cap.path / "memory.limit_in_bytes").write_text(str(limit))
            with contextlib.suppress(OSError):
                (cap.path / "memory.memsw.limit_in_bytes").write_text(str(limit))
            with contextlib.suppress(OSError):  # what the process holds already counts too
                (cap.path / "memory.move_charge_at_immigrate").write_text("3")
        else:
            raise RuntimeError("no memory cgroup controller to limit the process with")
        (cap.path / "cgroup.procs").write_text(str(pid))
        return cap

    def peak(self) -> int:
        """Most memory the cgroup held, bytes (what a pod's limit is checked against)."""
        f = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        p = self.path / f
        return int(p.read_text()) if p.exists() else -1

    def oom_kills(self) -> int:
        """Processes the OOM killer ended in this cgroup."""
        if self.v2:
            for line in (self.path / "memory.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
            return 0
        for line in (self.path / "memory.oom_control").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        """Move what is left to the parent and delete the cgroup."""
        procs = self.path / "cgroup.procs"
        if procs.exists():
            for pid in procs.read_text().split():
                with contextlib.suppress(OSError):
                    (self.path.parent / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            os.rmdir(self.path)
