"""The node agent: targets -> processes -> collector driver -> spool -> shipper.

Each pass of the driver first asks the ingest API which pods of the session run on this
node (pods come and go during a session), finds their processes through cgroups and hands
new PIDs to the collectors; the driver then writes what the collectors produced to a
`SpoolSink`, whose thread ships the spool. At the end (session end time, the session
leaving Running, SIGTERM) the driver stops the collectors and spools their last batch,
and the spool is drained for a bounded time; what cannot be sent stays on disk for the
next agent on this node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kubeprof.agent.cluster.client import IngestClient, Outcome
from kubeprof.agent.cluster.discovery import Discovery
from kubeprof.agent.cluster.shipper import Shipper
from kubeprof.agent.cluster.spool import Spool
from kubeprof.agent.cluster.spool_sink import SpoolSink
from kubeprof.agent.cluster.tracers import TracerSwitchboard
from kubeprof.agent.driver import Collector, Driver
from kubeprof.model import Batch, GpuTracerState, ProcessInfo
from kubeprof.protocol.phases import ACTIVE, Phase
from kubeprof.protocol.settings import (
    DEFAULT_DRAIN_TIMEOUT_S,
    DEFAULT_POLL_INTERVAL_S,
    DEFAULT_RESCAN_INTERVAL_S,
)

log = logging.getLogger("kubeprof.agent")


@dataclass
class AgentConfig:
    """Everything one agent run needs (filled from flags and environment by main.py)."""

    node: str  # this node's name (NODE_NAME, from the downward API)
    namespace: str  # namespace of the ProfilingSession
    session: str  # name of the ProfilingSession
    # how often collectors are polled and a batch spooled
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    rescan_interval_s: float = DEFAULT_RESCAN_INTERVAL_S  # how often targets, /proc are read
    end_time: float | None = None  # wall-clock (epoch) end of the session, if known
    drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S  # how long to keep sending at exit
    static_targets: tuple[str, ...] = ()  # pod UIDs to profile without asking the API


@dataclass
class NodeAgent:
    """One node's agent for one session: the collector driver writing to a SpoolSink."""

    config: AgentConfig
    client: IngestClient
    spool: Spool
    collectors: dict[str, Collector]
    discovery: Discovery = field(default_factory=Discovery)
    clock: Callable[[], float] = time.time
    stop_event: threading.Event = field(default_factory=threading.Event)
    targets: set[str] = field(default_factory=set)
    phase: str = Phase.PENDING.value
    tracers: TracerSwitchboard | None = None  # dormant GPU tracers of injected pods
    _next_scan: float = 0.0  # monotonic time of the next rescan

    def __post_init__(self) -> None:
        self.shipper = Shipper(self.spool, self.client)
        self.sink = SpoolSink(
            self.spool,
            self.shipper,
            node=self.config.node,
            discovery=self.discovery,
            drain_timeout_s=self.config.drain_timeout_s,
        )
        self.driver = Driver(
            self.collectors, self.sink, interval_s=self.config.poll_interval_s, log=log.warning
        )  # collector failures and notes, as they come
        self.targets |= set(self.config.static_targets)
        if self.config.static_targets:  # no API to ask: profile until the end time or SIGTERM
            self.phase = Phase.RUNNING.value

    @property
    def batches(self) -> int:
        """Batches spooled so far."""
        return self.sink.batches

    # -- one pass -------------------------------------------------------------------------
    def refresh_targets(self) -> None:
        """Ask the ingest API for this node's target pods, the phase and the end time."""
        ans = self.client.targets(self.config.node)
        if ans.outcome is Outcome.STORED:
            pods = ans.data.get("pods", [])
            self.targets = {str(p["uid"]) for p in pods} | set(self.config.static_targets)
            self.phase = str(ans.data.get("phase", self.phase))
            end = ans.data.get("endTime")
            if isinstance(end, (int, float)) and end > 0:
                self.config.end_time = float(end)
        elif ans.outcome in (Outcome.SESSION_OVER, Outcome.FORBIDDEN):
            log.warning("targets refused (HTTP %s: %s)", ans.status, ans.detail)
            if ans.outcome is Outcome.SESSION_OVER:
                self.phase = "Gone"  # not a session phase: the session no longer exists
        else:
            log.info(
                "targets unavailable (%s %s); keeping %d known target pod(s)",
                ans.status,
                ans.detail,
                len(self.targets),
            )

    def is_target_process(self, pid: int) -> bool:
        """Whether `pid` (ours) runs in one of the session's target pods: the GPU receiver
        takes records only from those, whoever else can open its socket."""
        ref = self.discovery.pod_of(pid)
        return ref is not None and ref.pod_uid in self.targets

    def attach_new(self) -> list[ProcessInfo]:
        """Find new target processes and give them to the targeted collectors."""
        new = self.discovery.scan(self.targets)
        for info in new:
            log.info(
                "target process pid=%d (%s) pod=%s container=%s",
                info.pid,
                info.name,
                info.pod_uid,
                info.container_id[:12],
            )
            for name, exc in self.driver.attach(info.pid).items():
                log.info("collector %s cannot attach to pid %d: %s", name, info.pid, exc)
        return new

    def rescan(self) -> Batch:
        """The driver's per-pass hook: every rescan interval, refresh targets and attach
        new processes; their process records join the pass's batch."""
        if time.monotonic() < self._next_scan:
            return Batch()
        if not self.config.static_targets:
            self.refresh_targets()
        new = self.attach_new()
        tracers: tuple[GpuTracerState, ...] = ()
        if self.tracers is not None and self.phase in ACTIVE:
            self.discovery.live()  # forget exited processes before looking for sockets
            self.tracers.sync(self.targets, self.discovery.seen)
            tracers = self.tracers.states(only_changed=True)
        self._next_scan = time.monotonic() + self.config.rescan_interval_s
        return Batch(processes=tuple(new), gpu_tracers=tracers)

    def should_stop(self) -> bool:
        end = self.config.end_time
        return (
            self.stop_event.is_set()
            or (end is not None and self.clock() >= end)
            or self.phase not in ACTIVE
        )

    def _stop_now(self) -> bool:
        """should_stop, switching the tracers off first so their last records still arrive."""
        stop = self.should_stop()
        if stop and self.tracers is not None:
            self.tracers.all_off()
        return stop

    def _last_tracer_states(self) -> None:
        """After the loop: the tracers' final answers (on -> off) reach the session too."""
        if self.tracers is not None:
            self.tracers.all_off()
            states = self.tracers.states(only_changed=True)
            if states:
                self.sink.write(Batch(gpu_tracers=states))

    # -- the run ----------------------------------------------------------------------------
    def run(self) -> int:
        """Collect until the session ends; returns 0, or 3 when data stayed unsent."""
        self.sink.start()
        self.driver.run(
            self._stop_now,
            on_pass=self.rescan,
            on_stop=self._last_tracer_states,
            wait=self.stop_event.wait,
        )
        st = self.shipper.stats
        log.info(
            "agent done: %d batches spooled, %d sent (%d duplicates, %d rows), %d "
            "retries, %d rejected, %d left in %s",
            self.batches,
            st.sent,
            st.duplicates,
            st.rows,
            st.retries,
            st.rejected,
            len(self.spool.pending()),
            self.spool.folder,
        )
        return 0 if self.sink.delivered else 3
