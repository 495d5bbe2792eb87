"""The local store's sink (`kubeprof record`); the node agent's is cluster/spool_sink.py.

It keeps data when the store fails: batches are held in memory while the store refuses
writes and, if it still refuses at the end, left on disk in the agent's batch format.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kubeprof.agent.cluster.spool import Spool
from kubeprof.agent.driver import merge
from kubeprof.model import Batch
from kubeprof.protocol import codec

if TYPE_CHECKING:  # the node agent needs no database driver
    from kubeprof.storage import Store


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
