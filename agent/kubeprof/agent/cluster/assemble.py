"""One session's node agent, built from `AgentSettings`.

Both ways a node agent runs build it here, so they cannot drift apart: `kubeprof agent`
(the per-session DaemonSet, settings from flags and environment) and the light agent's
deep workers (settings from the light agent's flags and the operator's assignment).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from kubeprof.agent.cluster import spool_sweep
from kubeprof.agent.cluster.agent import AgentConfig, NodeAgent
from kubeprof.agent.cluster.client import IngestClient
from kubeprof.agent.cluster.discovery import Discovery
from kubeprof.agent.cluster.spool import Spool
from kubeprof.model import Batch
from kubeprof.protocol.settings import AgentSettings, spool_folder

log = logging.getLogger("kubeprof.agent")
_TIMING = ("poll_interval_s", "rescan_interval_s", "end_time", "drain_timeout_s")


def build_node_agent(
    s: AgentSettings,
    token: str | Callable[[], str],
    *,
    static_targets: tuple[str, ...] = (),
    stop_event: threading.Event | None = None,
) -> NodeAgent:
    """The node agent of `s.session` with its collectors started (setting `stop_event`
    ends it); collectors that cannot start here are told to the operator in a batch."""
    from kubeprof.agent import collectors

    # The run's timing, as the settings give it (AgentConfig names the same fields).
    timing = {n: getattr(s, n) for n in _TIMING}
    config = AgentConfig(
        s.node_name, s.namespace, s.session, **timing, static_targets=static_targets
    )
    client = IngestClient(s.ingest_url, s.namespace, s.session, token)
    folder = spool_folder(s.namespace, s.session, s.session_uid)
    spool = Spool(s.spool_dir / folder, max_bytes=s.spool_max_mb << 20)
    # Folders of the old form (no session UID) beside ours, long idle: nobody ships them.
    spool_sweep.sweep_legacy(s.spool_dir, keep=folder)
    names = list(s.collectors)
    if s.gpu_socket and "gpu" not in names:
        names.append("gpu")
    started = collectors.start(
        names,
        collectors.CollectorOptions(
            hz=s.cpu_hz,
            nvml_interval_s=s.nvml_interval_s,
            gpu_socket=s.gpu_socket or None,
            offcpu_min_us=s.offcpu_min_us,
            offcpu_every=s.offcpu_every,
        ),
    )
    running, failed = started.running, started.failed
    agent = NodeAgent(
        config,
        client,
        spool,
        running,
        Discovery(s.proc_root),
        stop_event=stop_event or threading.Event(),
    )
    if s.gpu_socket and "gpu" in running:
        from kubeprof.agent.cluster.tracers import TracerSwitchboard

        # `on <name>` sends the tracers to <dir of their KUBEPROF_GPU_SOCKET>/<name>.sock,
        # the folder this socket is in (build.gpu_receiver: the session's uid).
        agent.tracers = TracerSwitchboard(Path(s.gpu_socket).stem, s.gpu_ctl_dir, s.proc_root)
        running["gpu"].accept_peer = agent.is_target_process  # type: ignore[attr-defined]
    if failed:
        agent.sink.write(collectors_failed_batch(failed))
    log.info(
        "agent for %s/%s on node %s: collectors %s%s",
        s.namespace,
        s.session,
        s.node_name,
        ",".join(running) or "none",
        f" (off: {', '.join(failed)})" if failed else "",
    )
    return agent


def collectors_failed_batch(failed: Mapping[str, object]) -> Batch:
    """A counters-only batch telling the operator which collectors could not start."""
    return Batch(counters={f"collector_off_{name}": 1 for name in failed})
