"""Switching the dormant GPU tracers of a session's selected pods on, and off at its end.

Pods injected by the operator's webhook run a dormant tracer per Python process, each
listening on ``<socket folder>/ctl/<pod uid>/<pid>.sock`` (kubeprof.agent.gpu.control). On
every rescan the agent switches on the sockets of its target pods that are not on yet (new
processes included), switches off those of pods that left the target set, and at the end
switches everything it turned on back off, so the workloads return to dormant without a
restart. A tracer that cannot trace answers with its reason, logged once per process.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kubeprof.agent.gpu import control

log = logging.getLogger("kubeprof.agent")


@dataclass
class TracerSwitchboard:
    """Which control sockets this agent turned on, and why others would not turn on."""

    gpu_socket: str  # the receiver's socket; its folder holds ctl/
    on: dict[Path, str] = field(default_factory=dict)  # socket -> pod uid
    refused: dict[Path, str] = field(default_factory=dict)  # socket -> the tracer's reason
    timeout_s: float = 2.0

    def sync(self, targets: Iterable[str]) -> None:
        """On for every target pod's tracers, off for tracers of pods no longer targeted."""
        wanted = {t.lower() for t in targets}
        for uid in sorted(wanted):
            for sock in control.pod_sockets(self.gpu_socket, uid):
                if sock in self.on or sock in self.refused:
                    continue
                answer = self._send(sock, "on")
                if answer == "ok on":
                    self.on[sock] = uid
                    log.info("GPU tracer on: pod %s process %s", uid, sock.stem)
                elif answer is not None:
                    self.refused[sock] = answer.removeprefix("error: ")
                    log.warning(
                        "GPU tracer of pod %s process %s cannot trace: %s",
                        uid,
                        sock.stem,
                        self.refused[sock],
                    )
        for sock, uid in list(self.on.items()):
            if uid not in wanted or not sock.exists():
                self._off(sock)

    def all_off(self) -> None:
        """The session is over: every tracer this agent switched on goes dormant again."""
        for sock in list(self.on):
            self._off(sock)

    def _off(self, sock: Path) -> None:
        self.on.pop(sock, None)
        if sock.exists():
            self._send(sock, "off")

    def _send(self, sock: Path, command: str) -> str | None:
        try:
            return control.switch(sock, command, self.timeout_s)
        except OSError as exc:  # the process exited (stale socket) or is stuck
            log.info("GPU tracer %s unreachable for %r: %s", sock, command, exc)
            return None
