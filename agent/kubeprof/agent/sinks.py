"""The driver's two sinks: the local store (`kubeprof record`) and the node agent's spool.

Both keep data when the far side fails: the store sink holds batches in memory while the
store refuses writes and, if it still refuses at the end, leaves them on disk in the
agent's batch format; the spool sink writes every batch to disk before the shipper
sends it.
"""

from __future__ import annotations

import logging
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from kubeprof.agent.cluster.discovery import Discovery
from kubeprof.agent.cluster.shipper import Shipper
from kubeprof.agent.cluster.spool import Spool
from kubeprof.agent.driver import is_empty, merge
from kubeprof.model import Batch
from kubeprof.protocol import codec
from kubeprof.protocol.settings import DEFAULT_DRAIN_TIMEOUT_S
from kubeprof.protocol.split import split

if TYPE_CHECKING:  # the node agent needs no database driver
    from kubeprof.storage import Store

log = logging.getLogger("kubeprof.agent")


class StoreSink:
    """Writes batches to the store; keeps them in memory while the store fails.

    When the store still fails at `close()`, the batches go to a `Spool` in `fallback`
    (gzip JSON in the cluster agent's batch codec) and `kept_in` names that folder.
    """

    def __init__(
        self, store: Store, session_id: int, *, fallback: Path, log: Callable[[str], None]
    ) -> None:
        self.store, self.session_id, self.log = store, session_id, log
        self.fallback = fallback
        self.pending: list[Batch] = []
        self.rows = 0
        self.records = 0  # CPU samples, waits + GPU activities: what a profile is made of
        self.kept_in: Path | None = None  # set when the last resort was used

    def write(self, batch: Batch) -> None:
        if (
            batch.samples
            or batch.gpu_activities
            or batch.gpu_metrics
            or batch.processes
            or batch.counters
            or batch.offcpu_samples
        ):
            self.pending.append(batch)
        self.flush()

    def flush(self) -> bool:
        """Write what is pending, oldest first; False (data kept) when the store fails."""
        while self.pending:
            try:
                self.rows += self.store.write_batch(self.session_id, self.pending[0])
                self.records += (
                    len(self.pending[0].samples)
                    + len(self.pending[0].gpu_activities)
                    + len(self.pending[0].offcpu_samples)
                )
            except Exception as exc:  # noqa: BLE001 - keep the data, report the cause
                self.log(f"kubeprof: store write failed, keeping data in memory: {exc}")
                return False
            self.pending.pop(0)
        return True

    def close(self) -> None:
        """Last flush; what the store still refuses goes to disk (see `kept_in`)."""
        if self.flush():
            return
        spool = Spool(self.fallback, max_bytes=1 << 62)  # the last copy: never drop any
        batch_id = f"local-{self.session_id}-{uuid.uuid4().hex}"
        spool.put(
            codec.encode(merge(self.pending), batch_id=batch_id, node=socket.gethostname()),
            batch_id,
        )
        self.kept_in = spool.folder


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
