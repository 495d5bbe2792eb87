"""The node agent loop: targets -> processes -> collectors -> spool -> shipper.

Each pass asks the ingest API which pods of the session run on this node (pods come and
go during a session), finds their processes through cgroups, hands new PIDs to the
collectors, and spools whatever the collectors produced. A separate thread ships the
spool. At the end (session end time, the session leaving Running, SIGTERM) collectors
are stopped, their last batch spooled, and the spool drained for a bounded time; what
cannot be sent stays on disk for the next agent on this node.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from kubeprof.agent.cluster.client import IngestClient, Outcome
from kubeprof.agent.cluster.collectors import Collector, TargetedCollector
from kubeprof.agent.cluster.discovery import Discovery
from kubeprof.agent.cluster.shipper import Shipper
from kubeprof.agent.cluster.spool import Spool
from kubeprof.model import Batch, ProcessInfo
from kubeprof.protocol import codec
from kubeprof.protocol.phases import ACTIVE

log = logging.getLogger("kubeprof.agent")


@dataclass
class AgentConfig:
    """Everything one agent run needs (filled from flags and environment by main.py)."""

    node: str  # this node's name (NODE_NAME, from the downward API)
    namespace: str  # namespace of the ProfilingSession
    session: str  # name of the ProfilingSession
    poll_interval_s: float = 1.0  # how often collectors are polled and a batch spooled
    rescan_interval_s: float = 5.0  # how often targets and /proc are re-read
    end_time: float | None = None  # wall-clock (epoch) end of the session, if known
    drain_timeout_s: float = 60.0  # how long to keep sending at exit
    static_targets: tuple[str, ...] = ()  # pod UIDs to profile without asking the API


def merge(batches: Iterable[Batch]) -> Batch:
    """One batch holding all records of `batches`; counters are summed."""
    parts = list(batches)
    counters: dict[str, int] = {}
    for b in parts:
        for k, v in b.counters.items():
            counters[k] = counters.get(k, 0) + v
    return Batch(
        samples=tuple(s for b in parts for s in b.samples),
        processes=tuple(p for b in parts for p in b.processes),
        gpu_activities=tuple(a for b in parts for a in b.gpu_activities),
        gpu_metrics=tuple(m for b in parts for m in b.gpu_metrics),
        counters=counters,
    )


def is_empty(batch: Batch) -> bool:
    return not (batch.samples or batch.processes or batch.gpu_activities or batch.gpu_metrics
                or batch.counters)


@dataclass
class NodeAgent:
    """One node's agent for one session."""

    config: AgentConfig
    client: IngestClient
    spool: Spool
    collectors: dict[str, Collector]
    discovery: Discovery = field(default_factory=Discovery)
    clock: Callable[[], float] = time.time
    stop_event: threading.Event = field(default_factory=threading.Event)
    targets: set[str] = field(default_factory=set)
    phase: str = "Pending"
    batches: int = 0
    _dropped_reported: int = 0
    _described: set[int] = field(default_factory=set)  # GPU PIDs already described

    def __post_init__(self) -> None:
        self.shipper = Shipper(self.spool, self.client)
        self.targets |= set(self.config.static_targets)
        if self.config.static_targets:  # no API to ask: profile until the end time or SIGTERM
            self.phase = "Running"

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
                self.phase = "Gone"
        else:
            log.info("targets unavailable (%s %s); keeping %d known target pod(s)",
                     ans.status, ans.detail, len(self.targets))

    def attach_new(self) -> list[ProcessInfo]:
        """Find new target processes and give them to the targeted collectors."""
        new = self.discovery.scan(self.targets)
        for info in new:
            log.info("target process pid=%d (%s) pod=%s container=%s", info.pid, info.name,
                     info.pod_uid, info.container_id[:12])
            for name, c in self.collectors.items():
                if isinstance(c, TargetedCollector):
                    try:
                        c.add_target(info.pid)
                    except Exception as exc:  # noqa: BLE001 - the PID may have exited
                        log.info("collector %s cannot attach to pid %d: %s", name, info.pid,
                                 exc)
        return new

    def enrich(self, batch: Batch) -> Batch:
        """Stamp pod UID and container id on every process record collectors produced,
        and describe GPU-using processes once, so their GPU use is tied to their pod."""
        batch = self._describe_gpu_pids(batch)
        if not batch.processes:
            return batch
        out = []
        for p in batch.processes:
            if not p.pod_uid:
                known = self.discovery.seen.get(p.pid)
                ref = self.discovery.pod_of(p.pid) if known is None else None
                if known is not None:
                    p = replace(p, pod_uid=known.pod_uid, container_id=known.container_id)
                elif ref is not None:
                    p = replace(p, pod_uid=ref.pod_uid, container_id=ref.container_id)
            out.append(p)
        return replace(batch, processes=tuple(out))

    def _describe_gpu_pids(self, batch: Batch) -> Batch:
        pids = {m.pid for m in batch.gpu_metrics if m.pid} | {
            a.pid for a in batch.gpu_activities if a.pid}
        pids -= self._described | {p.pid for p in batch.processes}
        extra = []
        for pid in sorted(pids):
            self._described.add(pid)
            info = self.discovery.seen.get(pid) or self.discovery.describe(pid)
            if info is not None:
                extra.append(info)
        return replace(batch, processes=batch.processes + tuple(extra)) if extra else batch

    def spool_batch(self, batch: Batch) -> None:
        """Encode and spool one batch (with a fresh id), then wake the shipper."""
        dropped = self.spool.dropped - self._dropped_reported
        if dropped:
            self._dropped_reported = self.spool.dropped
            batch = replace(batch, counters={**batch.counters, "agent_spool_dropped": dropped})
        if is_empty(batch):
            return
        batch_id = f"{self.config.node[:60]}-{uuid.uuid4().hex}"
        self.spool.put(codec.encode(self.enrich(batch), batch_id=batch_id,
                                    node=self.config.node), batch_id)
        self.batches += 1
        self.shipper.kick()

    def should_stop(self) -> bool:
        end = self.config.end_time
        return (self.stop_event.is_set() or (end is not None and self.clock() >= end)
                or self.phase not in ACTIVE)

    # -- the run ----------------------------------------------------------------------------
    def run(self) -> int:
        """Collect until the session ends; returns 0, or 3 when data stayed unsent."""
        ship_stop = threading.Event()
        sender = threading.Thread(target=self.shipper.run, args=(ship_stop,),
                                  name="kubeprof-shipper", daemon=True)
        sender.start()
        next_scan = 0.0
        try:
            while True:
                if time.monotonic() >= next_scan:
                    if not self.config.static_targets:
                        self.refresh_targets()
                    new = self.attach_new()
                    self.spool_batch(Batch(processes=tuple(new)))
                    next_scan = time.monotonic() + self.config.rescan_interval_s
                if self.should_stop():
                    break
                self.spool_batch(merge(c.poll() for c in self.collectors.values()))
                self.stop_event.wait(self.config.poll_interval_s)
        finally:
            self.spool_batch(merge(self._stop_all()))
            ship_stop.set()
            self.shipper.kick()
            sender.join(timeout=35)
        empty = self.shipper.drain(self.config.drain_timeout_s)
        st = self.shipper.stats
        log.info("agent done: %d batches spooled, %d sent (%d duplicates, %d rows), %d "
                 "retries, %d rejected, %d left in %s", self.batches, st.sent, st.duplicates,
                 st.rows, st.retries, st.rejected, len(self.spool.pending()),
                 self.spool.folder)
        return 0 if empty else 3

    def _stop_all(self) -> list[Batch]:
        out = []
        for name, c in self.collectors.items():
            try:
                out.append(c.stop())
            except Exception as exc:  # noqa: BLE001 - keep the other collectors' data
                log.warning("collector %s failed while stopping: %s", name, exc)
        return out


def read_token(path: Path) -> str:
    """The session token from its mounted Secret file (whitespace stripped)."""
    return path.read_text().strip()
