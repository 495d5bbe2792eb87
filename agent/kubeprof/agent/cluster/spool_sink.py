"""The node agent's sink: every batch is written to the spool on disk before the shipper
sends it, so an operator that is down or slow loses nothing (kubeprof record's sink is
agent/sinks.py)."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace

from kubeprof.agent.cluster.discovery import Discovery
from kubeprof.agent.cluster.shipper import Shipper
from kubeprof.agent.cluster.spool import Spool
from kubeprof.agent.driver import is_empty
from kubeprof.model import Batch
from kubeprof.protocol import codec
from kubeprof.protocol.settings import DEFAULT_DRAIN_TIMEOUT_S
from kubeprof.protocol.split import split


class SpoolSink:
    """The node agent's sink: stamp pod identity, encode, spool, and let the shipper send.

    `start()` runs the shipper on its own thread, so collection never waits for the
    network; `close()` stops it and drains the spool for at most `drain_timeout_s`;
    `delivered` then says whether everything reached the ingest.
    """

    def __init__(
        self,
        spool: Spool,
        shipper: Shipper,
        *,
        node: str,
        discovery: Discovery,
        drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S,
    ) -> None:
        self.spool, self.shipper, self.node, self.discovery = spool, shipper, node, discovery
        self.drain_timeout_s = drain_timeout_s
        self.batches = 0  # batches spooled
        self.delivered = False  # set by close(): the spool was emptied
        self._dropped_reported = 0
        self._described: set[int] = set()  # GPU PIDs already described
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Ship in the background from now on."""
        self._thread = threading.Thread(
            target=self.shipper.run, args=(self._stop,), name="kubeprof-shipper", daemon=True
        )
        self._thread.start()

    def write(self, batch: Batch) -> None:
        """Encode and spool one batch (with a fresh id), then wake the shipper."""
        dropped = self.spool.dropped - self._dropped_reported
        if dropped:
            self._dropped_reported = self.spool.dropped
            batch = replace(batch, counters={**batch.counters, "agent_spool_dropped": dropped})
        if is_empty(batch):
            return
        # A launch-bound GPU workload can collect more in one poll than the ingest takes in
        # one batch: spool it in pieces rather than have it refused and quarantined.
        for piece in split(self.enrich(batch)):
            batch_id = f"{self.node[:60]}-{uuid.uuid4().hex}"
            self.spool.put(codec.encode(piece, batch_id=batch_id, node=self.node), batch_id)
            self.batches += 1
        self.shipper.kick()

    def close(self) -> None:
        """Stop the background sender, then keep sending until empty or out of time."""
        self._stop.set()
        self.shipper.kick()
        if self._thread is not None:
            self._thread.join(timeout=35)
        self.delivered = self.shipper.drain(self.drain_timeout_s)

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
            a.pid for a in batch.gpu_activities if a.pid
        }
        pids -= self._described | {p.pid for p in batch.processes}
        extra = []
        for pid in sorted(pids):
            self._described.add(pid)
            info = self.discovery.seen.get(pid) or self.discovery.describe(pid)
            if info is not None:
                extra.append(info)
        return replace(batch, processes=batch.processes + tuple(extra)) if extra else batch
