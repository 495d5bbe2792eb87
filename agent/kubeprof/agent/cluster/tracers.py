"""Switching the dormant GPU tracers of a session's selected pods on, and off at its end.

Pods injected by the operator's webhook run a dormant tracer per Python process, each
listening on ``<pod's ctl folder>/<pid>-<random>.sock`` (kubeprof.agent.gpu.control). That
folder is the pod's own emptyDir: the agent (hostPID, CAP_SYS_PTRACE) reaches it through
``/proc/<pid>/root`` of the pod's processes it found by cgroup, so no shared node folder
exists in which one pod could reach or plant another's socket. Before sending anything it
asks the kernel who listens (SO_PEERCRED) and talks only to a process whose cgroup is that
pod's: a socket a pod points elsewhere (a symlink into another pod) is refused and reported.

On every rescan the agent switches on the sockets of its target pods that are not on yet
(new processes included), switches off those of pods that left the target set, and at the
end switches everything it turned on back off. Every command names this agent's session, so
a tracer held by two sessions stays on until both let go (gpu/control.py counts holders). A
tracer that cannot trace answers with its reason, logged once per process and kept for the
session's status (``states``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kubeprof.agent.cluster.cgroups import parse_proc_cgroup
from kubeprof.agent.gpu import control
from kubeprof.model import GpuTracerState, ProcessInfo
from kubeprof.protocol.settings import DEFAULT_GPU_CTL_DIR

log = logging.getLogger("kubeprof.agent")

Key = tuple[str, str]  # (pod uid, socket file name)


@dataclass
class TracerSwitchboard:
    """Which control sockets this agent turned on, and why others would not turn on."""

    session: str  # this agent's receiver name (the session's uid): sent with on/off
    ctl_dir: str = DEFAULT_GPU_CTL_DIR  # the control-socket folder inside each pod
    proc_root: Path = Path("/proc")
    timeout_s: float = 2.0
    # pid (our pid namespace) -> pod uid, "" when not a pod process; default: its cgroup
    pod_of: Callable[[int], str] | None = None
    on: dict[Key, Path] = field(default_factory=dict)  # switched on -> path used
    refused: dict[Key, str] = field(default_factory=dict)  # -> the tracer's (or our) reason
    pids: dict[Key, int] = field(default_factory=dict)  # -> the listening process (ours)
    traced: set[Key] = field(default_factory=set)  # ever switched on by this agent
    _changed: bool = True  # states() differ from what was last reported

    def _pod(self, pid: int) -> str:
        if self.pod_of is not None:
            return self.pod_of(pid)
        try:
            text = (self.proc_root / str(pid) / "cgroup").read_text()
        except OSError:
            return ""
        ref = parse_proc_cgroup(text)
        return ref.pod_uid if ref else ""

    def _checker(self, uid: str, key: Key) -> Callable[[int], str]:
        def check(pid: int) -> str:
            pod = self._pod(pid)
            if pod != uid:
                return (
                    f"control socket {key[1]} of pod {uid} is served by pid {pid} of "
                    f"{'pod ' + pod if pod else 'no pod'}; not switched"
                )
            self.pids[key] = pid
            return ""

        return check

    def find(self, uid: str, pids: Iterable[int]) -> dict[str, Path]:
        """The pod's control sockets (name -> a path to it), seen through its processes."""
        found: dict[str, Path] = {}
        rel = self.ctl_dir.lstrip("/")
        for pid in sorted(pids):
            folder = self.proc_root / str(pid) / "root" / rel
            try:
                names = [p.name for p in folder.iterdir() if p.name.endswith(".sock")]
            except OSError:  # exited, no such folder in this container, not readable
                continue
            for name in names:
                found.setdefault(name, folder / name)
        return found

    def sync(self, targets: Iterable[str], procs: Mapping[int, ProcessInfo]) -> None:
        """On for every target pod's tracers, off for tracers of pods no longer targeted."""
        wanted = {t.lower() for t in targets}
        by_pod: dict[str, list[int]] = {}
        for pid, info in procs.items():
            if info.pod_uid in wanted:
                by_pod.setdefault(info.pod_uid, []).append(pid)
        for uid in sorted(by_pod):
            for name, path in self.find(uid, by_pod[uid]).items():
                key = (uid, name)
                if key in self.on or key in self.refused:
                    continue
                answer = self._send(key, path, f"on {self.session}")
                if answer is None:
                    continue
                self._changed = True
                if answer.startswith("ok on"):
                    self.on[key] = path
                    self.traced.add(key)
                    log.info("GPU tracer on: pod %s process %s (%s)", uid, name, answer)
                else:
                    self.refused[key] = answer.removeprefix("error: ")
                    log.warning(
                        "GPU tracer of pod %s process %s cannot trace: %s",
                        uid,
                        name,
                        self.refused[key],
                    )
        for key in list(self.on):
            if key[0] not in wanted or not self.on[key].exists():
                self._off(key)

    def all_off(self) -> None:
        """The session is over: every tracer this agent switched on lets go of it."""
        for key in list(self.on):
            self._off(key)

    def _off(self, key: Key) -> None:
        path = self.on.pop(key)
        self._changed = True
        if path.exists():
            self._send(key, path, f"off {self.session}")

    def _send(self, key: Key, path: Path, command: str) -> str | None:
        try:
            return control.switch(path, command, self.timeout_s, self._checker(key[0], key))
        except control.PeerRefused as exc:  # another pod's process behind this pod's socket
            self._refuse(key, str(exc))
            return None
        except PermissionError as exc:  # its mode bits shut us out (root without DAC_OVERRIDE)
            self._refuse(
                key,
                f"the agent may not connect to control socket {key[1]} "
                f"({exc.strerror}); the tracer must make it 0666",
            )
            return None
        except OSError as exc:  # the process exited (stale socket) or is stuck
            log.info("GPU tracer %s unreachable for %r: %s", path, command, exc)
            return None

    def _refuse(self, key: Key, why: str) -> None:
        if key not in self.refused:
            self.refused[key] = why
            self._changed = True
            log.warning("GPU tracer of pod %s: %s", key[0], why)

    def states(self, *, only_changed: bool = False) -> tuple[GpuTracerState, ...]:
        """One record per tracer seen: on, or refused with the reason (for the batch)."""
        if only_changed and not self._changed:
            return ()
        self._changed = False
        out = [
            GpuTracerState(
                pod_uid=k[0],
                pid=self.pids.get(k, 0),
                socket=k[1],
                state="on" if k in self.on else "off",
                reason="",
            )
            for k in sorted(self.traced)
        ]
        out += [
            GpuTracerState(
                pod_uid=k[0],
                pid=self.pids.get(k, 0),
                socket=k[1],
                state="refused",
                reason=why[:1000],
            )
            for k, why in self.refused.items()
        ]
        return tuple(out)
